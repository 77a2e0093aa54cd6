"""kvreport/1: the report record and one module per output format (JSON, JUnit, Markdown, HTML, console)."""

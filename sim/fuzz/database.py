"""The example database a campaign shares: a directory, or Hypothesis' Redis database (`redis://HOST:PORT`)
so that campaigns on several machines share what they find. The `redis` client is an optional extra."""

from __future__ import annotations

from urllib.parse import urlparse


def open_database(spec: str | None):
    """None (no database), a DirectoryBasedExampleDatabase, or a RedisExampleDatabase; ValueError on a bad spec."""
    if not spec:
        return None
    if spec.startswith("redis://"):
        try:
            import redis
            from hypothesis.extra.redis import RedisExampleDatabase
        except ImportError:
            raise ValueError("a redis:// database needs the redis client: pip install 'kvsim[redis]'") from None
        u = urlparse(spec)
        if not u.hostname or not u.port:
            raise ValueError(f"{spec}: expected redis://HOST:PORT")
        client = redis.Redis(host=u.hostname, port=u.port, db=int(u.path.strip("/") or 0))
        try:
            client.ping()
        except redis.exceptions.ConnectionError as exc:
            raise ValueError(f"{spec}: cannot connect ({exc})") from None
        return RedisExampleDatabase(client)
    from hypothesis.database import DirectoryBasedExampleDatabase
    return DirectoryBasedExampleDatabase(spec)

"""Seeded bugs of PEER-11's crash classification for `kvsim selfcheck`, in the record format of `catalogue.py` (which
concatenates them): the drivers' ``crash_facts`` (sim/peers/vllm/driver.py, sim/peers/sglang/driver.py) and the
engine judge's PEER-11 finding (sim/peers/judges/engine_judge.py). Each is killed by the `judge-crash` machine
(sim/fuzz/crash_machine.py, against sim/fuzz/crash_reference.py). Plain data: no kvsim import here.
"""

MUTANTS = [
    dict(name="crash-lookalike-package-is-engine", machine="judge-crash",
         bug="the engine frame is any file whose path starts with the package's: a sibling package (vllm_ext/) is "
             "taken for vLLM and its exception reported as the engine's",
         file="sim/peers/vllm/driver.py",
         old="        if fn.startswith(package + os.sep):\n            if engine is None:",
         new="        if fn.startswith(package):\n            if engine is None:"),
    dict(name="crash-outermost-engine-frame", machine="judge-crash",
         bug="the finding names the outermost engine frame (the scheduler's entry point) instead of the innermost "
             "(where the engine raised)",
         file="sim/peers/vllm/driver.py",
         old="    for t in reversed(frames):\n        fn = t.tb_frame.f_code.co_filename\n        if fn.startswith(",
         new="    for t in frames:\n        fn = t.tb_frame.f_code.co_filename\n        if fn.startswith("),
    dict(name="crash-driver-raise-blamed-on-engine", machine="judge-crash",
         bug="an exception raised in the driver's own code below an engine call is reported as the engine's crash "
             "(PEER-11) instead of kvsim's own bug",
         file="sim/peers/vllm/driver.py",
         old="        engine = None  # raised in this script's own code: the driver's bug, whatever called it",
         new="        pass"),
    dict(name="crash-request-of-outer-frame", machine="judge-crash",
         bug="the request of the crash is the outermost engine frame's request local, not the innermost's",
         file="sim/peers/vllm/driver.py",
         old="            if rid is None and req is not None and isinstance(",
         new="            if req is not None and isinstance("),
    dict(name="crash-engine-fault-is-a-driver-bug", machine="judge-crash",
         bug="SGLang's EngineFault (an engine answer the driver cannot go on from) is classified as kvsim's own bug",
         file="sim/peers/sglang/driver.py",
         old="    if isinstance(exc, EngineFault):",
         new="    if False:"),
    dict(name="crash-sglang-outermost-engine-frame", machine="judge-crash",
         bug="SGLang's finding names the outermost engine frame: the search for the innermost never stops",
         file="sim/peers/sglang/driver.py",
         old="  # the node the innermost engine frame was handling\n            break",
         new="  # the node the innermost engine frame was handling"),
    dict(name="crash-block-of-outermost-frame", machine="judge-crash",
         bug="vLLM's crash names the block the outermost engine frame held, not the innermost's",
         file="sim/peers/vllm/driver.py",
         old="            if block is None and isinstance(got, int) and got >= 0:",
         new="            if isinstance(got, int) and got >= 0:"),
    dict(name="crash-message-keeps-newlines", machine="judge-crash",
         bug="the crash message is not made one line: an assertion's multi-line text breaks the one-line finding",
         file="sim/peers/vllm/driver.py",
         old="    return {\"type\": type(exc).__name__, \"message\": \" \".join(str(exc).split())[:300],",
         new="    return {\"type\": type(exc).__name__, \"message\": str(exc)[:300],"),
    dict(name="crash-finding-drops-request", machine="judge-crash",
         bug="the PEER-11 finding's context loses the request the engine was processing",
         file="sim/peers/judges/engine_judge.py",
         old="                   exception=facts.get(\"type\"), frame=facts.get(\"frame\"), request=rid,",
         new="                   exception=facts.get(\"type\"), frame=facts.get(\"frame\"), request=None,"),
]

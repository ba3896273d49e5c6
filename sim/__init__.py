"""The deterministic simulator (issue 28): the whole cluster in one process, on simulated
time, network and disk, checked over thousands of seeds. See sim/runner.py for a run, and
the README's "Simulation" section for reading a failing trace. Production code never
imports this package (tests/test_architecture.py checks it)."""

"""The claiming loop test_store_claims runs in spawned processes. Its own module, importing only
the store: a spawned process imports the module of the function it runs, and the test module's
imports (serve_helpers: torch) would cost each process seconds."""

import time

from pipedit.serve.jobs.store import JobStore


def claim_all_in_a_process(url, name, results, start):
    store = JobStore(url)
    taken = []
    start.wait(timeout=60)  # all processes claim at the same time
    while (record := store.claim(name, 30)) is not None:
        taken.append(record.id)
        time.sleep(0.01)
    results.put((name, taken))
    store.close()

"""The multi-process interleaving fuzz: 2-4 engines in separate processes on one thread.

``python -m tests.fuzz --seeds 500 --store sqlite`` (or ``--store postgres``) is the release
check; the test suite runs a few seeds. Each seed fixes the number of workers, their turns, their
options and faults, and whether (and when) one worker is killed with SIGKILL mid-run.

Checks after every run: no message lost or duplicated (ids unique, seqs contiguous, every
acknowledged turn stored), none both raw and observed (no message after the cursor appears in the
log or the chunks, and every worker checked its own contexts), the cursor never moved back across
generations, no chunk stranded (chunks continue right after the cursor, only the head has them),
and every committed generation is reachable in history.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from obsmem.stores import Store
from obsmem.testing.store_conformance.kit import assert_record_invariants

from .worker import RESOURCE, THREAD, open_store

ROOT = Path(__file__).resolve().parents[2]
_ID = re.compile(r"\b(w\d+t\d+r?)\b")  # "w0t3": a user message, "w0t3r": a reply


@dataclass(frozen=True, slots=True)
class SeedPlan:
    seed: int
    workers: int
    turns: int
    kill_after: float | None  # seconds after start, or None

    @classmethod
    def of(cls, seed: int) -> SeedPlan:
        rng = random.Random(seed)
        return cls(
            seed=seed,
            workers=rng.randint(2, 4),
            turns=rng.randint(6, 16),
            kill_after=rng.choice([None, None, rng.uniform(0.3, 2.0)]),
        )


async def run_seed(target: str, seed: int) -> SeedPlan:
    plan = SeedPlan.of(seed)
    store = open_store(target)
    try:
        await store.create_thread(THREAD, RESOURCE)
    finally:
        await store.aclose()
    # The checkout's own code (src/) wins over whatever obsmem is installed.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.fuzz.worker",
            target,
            str(seed),
            str(i),
            str(plan.turns),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=ROOT,
            env=env,
        )
        for i in range(plan.workers)
    ]
    victim = random.Random(seed).randrange(plan.workers)
    if plan.kill_after is not None:
        try:
            await asyncio.wait_for(procs[victim].wait(), timeout=plan.kill_after)
        except TimeoutError:
            procs[victim].send_signal(signal.SIGKILL)
    outputs = await asyncio.gather(*(p.communicate() for p in procs))
    for i, (p, (_, err)) in enumerate(zip(procs, outputs, strict=True)):
        killed = plan.kill_after is not None and i == victim and p.returncode == -signal.SIGKILL
        if not killed and p.returncode != 0:
            raise AssertionError(
                f"seed {seed}: worker {i} failed ({p.returncode}):\n{err.decode()[-3000:]}"
            )
    store = open_store(target)
    try:
        await check_final_state(store, plan, [o.decode() for o, _ in outputs])
    finally:
        await store.aclose()
    return plan


async def check_final_state(store: Store, plan: SeedPlan, outputs: list[str]) -> None:
    messages = await store.list_messages(THREAD)
    ids = [m.id for m in messages]
    assert len(ids) == len(set(ids)), f"seed {plan.seed}: duplicated messages"
    assert [m.seq for m in messages] == list(range(1, len(messages) + 1)), "seq gap"
    stored = set(ids)
    for worker, out in enumerate(outputs):
        done = out.count("done")
        for turn in range(done):  # every acknowledged turn is stored, input and reply
            assert f"w{worker}t{turn}-u" in stored, f"seed {plan.seed}: lost w{worker}t{turn}-u"
            assert f"w{worker}t{turn}-a" in stored, f"seed {plan.seed}: lost w{worker}t{turn}-a"
    key = f"thread:{THREAD}"
    head = await store.get_record(key)
    if head is None:
        return  # nothing was ever observed
    await assert_record_invariants(store, key)
    covered = head.covered_through(THREAD)
    seq_of = {m.id: m.seq or 0 for m in messages}
    texts = [head.observations, *(c.observations for c in head.chunks)]
    for tag in {t for text in texts for t in _ID.findall(text)}:
        seq = seq_of.get(f"{tag[:-1]}-a" if tag.endswith("r") else f"{tag}-u")
        assert seq is not None, f"seed {plan.seed}: the log mentions {tag}, never stored"
        assert seq <= covered, (
            f"seed {plan.seed}: {tag} (seq {seq}) is observed but still raw (covered {covered})"
        )
    history = await store.history(key)
    assert [r.generation for r in history] == list(range(head.generation, -1, -1)), (
        f"seed {plan.seed}: a generation is missing from history"
    )

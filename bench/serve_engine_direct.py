"""The engine alone, without HTTP, JSON or tokenization: the baseline for the serving benchmark's
overhead figure. Loads the model once, then for each line `SEED_START COUNT` read from stdin
submits COUNT requests one at a time (the same pre-tokenized prompt and seeds the HTTP benchmark
sends) and prints one JSON line of per-request times and token counts. bench/serve.ts keeps it
running next to the server and alternates between the two, so both see the same machine."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from art_server.chat.prompt import prompt_token_ids
from art_server.core.allocator import keep_freed_memory
from art_server.engine.hf.engine import _seed_generator, load_hf_engine
from art_server.engine.hf.sampling import RowParams
from art_server.engine.hf.scheduler import FinishEvent, Sequence
from art_server.models.resolve import resolve_base_model


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    p.add_argument("--data-dir", default=".art")
    p.add_argument("--model-cache", default=None)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--messages", default='[{"role": "user", "content": "Name an empty cell."}]', help="JSON")
    a = p.parse_args()
    keep_freed_memory()  # as the server does
    path = resolve_base_model(a.model, Path(a.data_dir), Path(a.model_cache) if a.model_cache else None).path
    engine = load_hf_engine(a.model, path, device="cpu", dtype=a.dtype)
    prompt = prompt_token_ids(engine.tokenizer, json.loads(a.messages), None)
    loop = asyncio.get_running_loop()

    async def one(seed: int) -> tuple[float, int]:
        done: asyncio.Future = loop.create_future()
        seq = Sequence(
            f"direct-{seed}",
            0,
            None,
            prompt,
            a.max_tokens,
            RowParams(generator=_seed_generator(seed, 0, engine.device)),
            lambda e: isinstance(e, FinishEvent) and loop.call_soon_threadsafe(done.set_result, None),
            stream=False,
        )
        started = time.perf_counter()
        engine.scheduler.submit([seq])
        await done
        return time.perf_counter() - started, len(seq.generated)

    for seed in range(3):  # warm-up
        await one(seed)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        start, count = map(int, line.split())
        results = [await one(seed) for seed in range(start, start + count)]
        print(json.dumps({"times_s": [t for t, _ in results], "tokens": [n for _, n in results]}), flush=True)
    await engine.close()


asyncio.run(main())

"""The engine alone, without HTTP, JSON or tokenization: the baseline for the serving benchmark's
overhead figure. Submits the same pre-tokenized prompt with the same seeds the HTTP benchmark
uses, one request at a time, and prints one JSON line of per-request times and token counts."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from art_server.chat.prompt import prompt_token_ids
from art_server.engine.hf import load_hf_engine
from art_server.models.manager import resolve_base_model_path


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="builtin:tiny")
    p.add_argument("--data-dir", default=".art")
    p.add_argument("--requests", type=int, default=50)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--message", default="Name an empty cell.")
    a = p.parse_args()
    engine = load_hf_engine(a.model, resolve_base_model_path(a.model, Path(a.data_dir)), device="cpu")
    messages = [{"role": "user", "content": a.message}]
    prompt = prompt_token_ids(engine.tokenizer, messages, None)
    loop = asyncio.get_running_loop()
    times, tokens = [], []
    from art_server.engine.hf import _seed_generator
    from art_server.engine.sampling import RowParams
    from art_server.engine.scheduler import FinishEvent, Sequence, TokenEvent

    for i in range(-3, a.requests):  # three warm-up requests
        queue: asyncio.Queue = asyncio.Queue()
        seq = Sequence(f"direct-{i}", 0, None, prompt, a.max_tokens,
                       RowParams(generator=_seed_generator(max(i, 0), 0, engine.device)),
                       lambda e: loop.call_soon_threadsafe(queue.put_nowait, e))
        started = time.perf_counter()
        engine.scheduler.submit([seq])
        count = 0
        while True:
            event = await queue.get()
            if isinstance(event, TokenEvent):
                count += 1
            elif isinstance(event, FinishEvent):
                break
        if i >= 0:
            times.append(time.perf_counter() - started)
            tokens.append(count)
    await engine.close()
    print(json.dumps({"times_s": times, "tokens": tokens}))


asyncio.run(main())

"""A local stand-in for `vllm serve`, for what vLLM's CPU build cannot show: sleep mode (CUDA-only
in vLLM). Everything else of the vllm engine runs against the real vLLM (test_vllm_real.py).

It takes vLLM's CLI flags and speaks the parts of vLLM's HTTP API the engine uses, with the same
preconditions vLLM has: runtime LoRA endpoints exist only with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True
and --enable-lora; /sleep and /wake_up only with VLLM_SERVER_DEV_MODE=1 and --enable-sleep-mode;
token ids only with `return_token_ids: true`; every /v1 route needs the --api-key. Behind it is the
hf engine. Each call is appended to the JSON-lines file named by STANDIN_LOG, for assertions.

    python vllm_standin.py serve --model <model dir> --served-model-name NAME --port P --api-key K ...
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from art_server.engine.base import EngineError
from art_server.engine.hf.engine import load_hf_engine


def vllm_error(status: int, message: str) -> JSONResponse:
    # vLLM's older error shape (top-level "object": "error"): the engine must read both shapes.
    return JSONResponse({"object": "error", "message": message, "type": "BadRequestError", "code": status}, status_code=status)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("subcommand", choices=["serve"])
    p.add_argument("--model", required=True)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--served-model-name", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--api-key", required=True)
    p.add_argument("--enable-lora", action="store_true")
    p.add_argument("--max-lora-rank", type=int, default=16)
    p.add_argument("--max-loras", type=int, default=1)
    p.add_argument("--enable-sleep-mode", action="store_true")
    p.add_argument("--logprobs-mode", default="raw_logprobs")
    p.add_argument("--generation-config", default="auto")  # the engine passes "vllm": neutral defaults
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    args = p.parse_args()
    if args.logprobs_mode != "processed_logprobs":
        sys.exit("stand-in: the hf engine behind it returns processed logprobs only; pass --logprobs-mode processed_logprobs")

    engine = load_hf_engine(args.served_model_name, args.model, device="cpu")
    runtime_lora = os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "").lower() in ("1", "true")
    dev_mode = os.environ.get("VLLM_SERVER_DEV_MODE") == "1"
    state = {"sleeping": False}
    app = FastAPI()

    def record(path: str, body: object = None) -> None:
        if os.environ.get("STANDIN_LOG"):
            with open(os.environ["STANDIN_LOG"], "a") as f:
                f.write(json.dumps({"path": path, "body": body}) + "\n")

    @app.middleware("http")
    async def auth(request: Request, call_next):
        if request.url.path != "/health" and request.headers.get("authorization") != f"Bearer {args.api_key}":
            return JSONResponse({"error": "Unauthorized"}, status_code=401)
        return await call_next(request)

    @app.get("/health")
    async def health():
        return {}

    @app.get("/v1/models")
    async def models():
        data = [{"id": args.served_model_name, "object": "model", "max_model_len": engine.context_length}]
        data += [{"id": key, "object": "model", "parent": args.served_model_name} for key in engine.runner.adapter_slots]
        return {"object": "list", "data": data}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        record(
            "/v1/completions",
            {"model": body.get("model"), "return_token_ids": body.get("return_token_ids"), "prompt": body.get("prompt")},
        )
        if state["sleeping"]:
            return vllm_error(503, "engine is sleeping")
        model = body.get("model")
        adapter = None if model == args.served_model_name else model
        if adapter is not None and adapter not in engine.runner.adapter_slots:
            return vllm_error(404, f"The model `{model}` does not exist.")
        if not isinstance(body.get("prompt"), list):
            return vllm_error(400, "the stand-in takes token-id prompts only")
        with_ids = bool(body.get("return_token_ids"))
        try:
            states = await engine.sample(
                body["prompt"],
                {**body, "top_k": max(0, body.get("top_k") or 0), "top_logprobs": body.get("logprobs") or 0},
                adapter,
                "standin",
            )
        except EngineError as error:
            return vllm_error(error.status, str(error))

        def choice(state, tokens, logprobs, finish):
            item = {
                "index": state.index,
                "text": "",
                "finish_reason": finish,
                "logprobs": {
                    "token_logprobs": logprobs,
                    "top_logprobs": [{f"token_id:{t}": lp} for t, lp in zip(tokens, logprobs)],
                },
            }
            if with_ids:
                item["token_ids"] = tokens
            return item

        if body.get("stream"):

            async def sse():
                for state in states:
                    for k, (token, logprob) in enumerate(zip(state.token_ids, state.logprobs)):
                        last = k == len(state.token_ids) - 1
                        chunk = {"choices": [choice(state, [token], [logprob], state.finish_reason if last else None)]}
                        yield f"data: {json.dumps(chunk)}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(sse(), media_type="text/event-stream")
        return {
            "choices": [choice(st, st.token_ids, st.logprobs, st.finish_reason) for st in states],
            **({"prompt_token_ids": body["prompt"]} if with_ids else {}),
        }

    if runtime_lora:

        @app.post("/v1/load_lora_adapter")
        async def load(request: Request):
            body = await request.json()
            record("/v1/load_lora_adapter", body)
            if not args.enable_lora:
                return vllm_error(400, "LoRA is not enabled. Use --enable-lora")
            if body["lora_name"] in engine.runner.adapter_slots:
                return vllm_error(400, f"The lora adapter '{body['lora_name']}' has already been loaded.")
            await engine.load_adapter(body["lora_name"], Path(body["lora_path"]))
            return f"Success: LoRA adapter '{body['lora_name']}' added successfully."

        @app.post("/v1/unload_lora_adapter")
        async def unload(request: Request):
            body = await request.json()
            record("/v1/unload_lora_adapter", body)
            if body["lora_name"] not in engine.runner.adapter_slots:
                return vllm_error(404, f"The lora adapter '{body['lora_name']}' cannot be found.")
            await engine.unload_adapter(body["lora_name"])
            return f"Success: LoRA adapter '{body['lora_name']}' removed successfully."

    if dev_mode and args.enable_sleep_mode:

        @app.post("/sleep")
        async def sleep(level: int = 1):
            record("/sleep", {"level": level})
            state["sleeping"] = True
            return {}

        @app.post("/wake_up")
        async def wake_up():
            record("/wake_up")
            state["sleeping"] = False
            return {}

        @app.get("/is_sleeping")
        async def is_sleeping():
            return {"is_sleeping": state["sleeping"]}

    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

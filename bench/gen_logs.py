"""Synthetic serving logs for the throughput benchmark and the parallel-ingest tests.

Realistic rather than exhaustive: a start-up with config echo and capture lines, then a steady
state dominated by the lines a busy server writes (uvicorn access lines for traffic, health
checks and metric scrapes; request logging; periodic batch/stats lines), with an occasional
traceback, retraction or restart. Deterministic for a given seed, and fast enough (tens of
MB/s) that the benchmark can rebuild its inputs.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

_WORDS = (
    "the quick brown fox jumps over a lazy dog while graphs replay decode steps "
    "in small batches and long prompts fall back to eager prefill on busy nodes "
    "summarise this ticket about latency spikes after enabling capture"
).split()

SGLANG_CAPTURE_BS = [1, 2, 4, 8] + list(range(16, 161, 8))


class _Clock:
    """Monotonic fake time with cached second-resolution stamps (formatting is the slow part)."""

    def __init__(self, start: float, step: float, sglang: bool) -> None:
        self.t = start
        self.step = step
        self.sglang = sglang
        self._sec = -1
        self._stamp = ""

    def tick(self, rng: random.Random) -> str:
        self.t += rng.random() * 2 * self.step
        sec = int(self.t)
        if sec != self._sec:
            self._sec = sec
            dt = datetime.fromtimestamp(sec, tz=timezone.utc)
            self._stamp = dt.strftime("%Y-%m-%d %H:%M:%S" if self.sglang else "%m-%d %H:%M:%S")
        return self._stamp


def _prompt(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(lo, hi)))


# ----------------------------------------------------------------------------- SGLang
def _sglang_startup(ts: str, max_bs: int, restart_no: int) -> list[str]:
    bs = [b for b in SGLANG_CAPTURE_BS if b <= max_bs]
    args = (
        f"ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', tokenizer_path='meta-llama/Llama-3.1-8B-Instruct', "
        f"host='0.0.0.0', port={30000 + restart_no}, mem_fraction_static=0.85, max_running_requests=256, "
        f"chunked_prefill_size=8192, max_prefill_tokens=16384, schedule_policy='fcfs', tp_size=2, dp_size=1, "
        f"stream_interval=1, random_seed=42, log_level='info', log_requests=True, log_requests_level=0, "
        f"decode_log_interval=40, attention_backend='flashinfer', disable_cuda_graph=False, "
        f"disable_cuda_graph_padding=False, enable_torch_compile=False, cuda_graph_max_bs={max_bs}, "
        f"cuda_graph_bs=None, enable_profile_cuda_graph=False, disaggregation_mode='null', "
        f"enable_dp_attention=False, speculative_algorithm=None)"
    )
    out = [f"[{ts}] server_args={args}"]
    for r in ("TP0", "TP1"):
        out += [
            f"[{ts} {r}] Init torch distributed begin.",
            f"[{ts} {r}] Init torch distributed ends. mem usage=0.10 GB",
            f"[{ts} {r}] Load weight begin. avail mem=78.52 GB",
            f"[{ts} {r}] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=70.93 GB, mem usage=7.59 GB.",
            f"[{ts} {r}] KV Cache is allocated. #tokens: 981344, K size: 29.95 GB, V size: 29.95 GB",
            f"[{ts} {r}] Memory pool end. avail mem=10.21 GB",
            f"[{ts} {r}] Capture cuda graph begin. This can take up to several minutes. avail mem=9.85 GB",
        ]
    out.append(f"[{ts} TP0] Capture cuda graph bs {bs}")
    n = len(bs)
    bar = "".join(
        f"Capturing batches (bs={b} avail_mem={9.8 - 0.01 * i:.2f} GB): {100 * (i + 1) // n:3d}%|##| "
        f"{i + 1}/{n} [00:{i // 4:02d}<00:{(n - i) // 4:02d},  4.1it/s]\r"
        for i, b in enumerate(reversed(bs))
    )
    out.append(bar.rstrip("\r"))
    for r in ("TP0", "TP1"):
        out.append(
            f"[{ts} {r}] Capture cuda graph end. Time elapsed: 6.84 s. mem usage=0.61 GB. avail mem=9.24 GB."
        )
    out += [
        f"[{ts} TP0] max_total_num_tokens=981344, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        f"max_running_requests=256, context_len=131072, available_gpu_mem=9.24 GB",
        f"[{ts}] INFO:     Started server process [{4242 + restart_no}]",
        f"[{ts}] INFO:     Waiting for application startup.",
        f"[{ts}] INFO:     Application startup complete.",
        f"[{ts}] INFO:     Uvicorn running on http://0.0.0.0:{30000 + restart_no} (Press CTRL+C to quit)",
        f'[{ts}] INFO:     127.0.0.1:40000 - "GET /get_model_info HTTP/1.1" 200 OK',
        f"[{ts}] The server is fired up and ready to roll!",
    ]
    return out


_SGLANG_TRACEBACK = """[{ts}] Error in request handler
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/entrypoints/http_server.py", line 412, in generate_request
    ret = await _global_state.tokenizer_manager.generate_request(obj, request).__anext__()
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/tokenizer_manager.py", line 463, in generate_request
    tokenized_obj = await self._tokenize_one_request(obj)
ValueError: The input (131200 tokens) is longer than the model's context length (131072 tokens)."""


def sglang_lines(
    target_bytes: int,
    seed: int = 0,
    restarts: int = 0,
    tracebacks: int = 1,
    real: bool = False,
    max_bs: int = 160,
) -> Iterator[str]:
    """Lines of an SGLang log of about ``target_bytes`` (newlines not included); ``real``:
    the steady state in the shapes real logs have (``_sglang_real``); ``max_bs``: the
    server's ``cuda_graph_max_bs`` (its capture list is cut there)."""
    rng = random.Random(seed)
    clock = _Clock(datetime(2025, 6, 10, 8, 0, tzinfo=timezone.utc).timestamp(), 0.004, sglang=True)
    written = 0
    restart_at = sorted(rng.uniform(0.2, 0.9) * target_bytes for _ in range(restarts))
    tb_at = sorted(rng.uniform(0.05, 0.95) * target_bytes for _ in range(tracebacks))
    for line in _sglang_startup(clock.tick(rng), max_bs, 0):
        written += len(line) + 1
        yield line
    running, queue, forward = 40, 0, 0
    rid_pool: list[str] = []
    restart_no = 0
    while written < target_bytes:
        ts = clock.tick(rng)
        if restart_at and written >= restart_at[0]:
            restart_at.pop(0)
            restart_no += 1
            block = _sglang_startup(ts, max_bs, restart_no)
        elif tb_at and written >= tb_at[0]:
            tb_at.pop(0)
            block = _SGLANG_TRACEBACK.format(ts=ts).split("\n")
        else:
            steady = _sglang_real if real else _sglang_steady
            block = [steady(rng, ts, rid_pool, running, queue)]
            x = rng.random()
            if x < 0.02:
                running = max(1, min(256, running + rng.randint(-12, 12)))
                queue = max(0, queue + rng.randint(-5, 5)) if running > 200 else 0
            elif x < 0.0203 and running > 200:
                block.append(
                    f"[{ts} TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.4 -> 0.7"
                )
            forward += 1
        for line in block:
            written += len(line) + 1
            yield line


def _sglang_steady(rng: random.Random, ts: str, rids: list[str], running: int, queue: int) -> str:
    x = rng.random()
    if x < 0.55:  # uvicorn: traffic, health probes and metric scrapes
        port = rng.randint(30000, 65000)
        y = rng.random()
        if y < 0.4:
            return f'[{ts}] INFO:     10.0.{rng.randint(0, 9)}.{rng.randint(1, 250)}:{port} - "POST /generate HTTP/1.1" 200 OK'
        if y < 0.8:
            return f'[{ts}] INFO:     127.0.0.1:{port} - "GET /health HTTP/1.1" 200 OK'
        return f'[{ts}] INFO:     10.1.0.7:{port} - "GET /metrics HTTP/1.1" 200 OK'
    if x < 0.80:  # decode batch (every decode_log_interval steps)
        bs = max(1, running + rng.randint(-3, 3))
        tok = bs * rng.randint(300, 900)
        return (
            f"[{ts} TP0] Decode batch, #running-req: {bs}, #token: {tok}, token usage: {tok / 981344:.2f}, "
            f"cuda graph: {bs <= 160}, gen throughput (token/s): {bs * rng.uniform(20, 40):.2f}, "
            f"#queue-req: {queue}, "
        )
    if x < 0.88:  # prefill batch
        new_seq = rng.randint(1, 4)
        return (
            f"[{ts} TP0] Prefill batch, #new-seq: {new_seq}, #new-token: {new_seq * rng.randint(64, 2048)}, "
            f"#cached-token: {rng.randint(0, 512)}, token usage: {rng.uniform(0, 0.9):.2f}, "
            f"#running-req: {running}, #queue-req: {queue}, "
        )
    if x < 0.94 or not rids:  # request received
        rid = f"{rng.getrandbits(128):032x}"
        rids.append(rid)
        if len(rids) > 512:
            del rids[: len(rids) - 512]
        return (
            f"[{ts}] Receive: obj=GenerateReqInput(rid='{rid}', text='{_prompt(rng, 4, 10)}', "
            f"sampling_params={{'max_new_tokens': 128, 'temperature': 0.7}}, stream=False)"
        )
    rid = rids.pop(rng.randrange(len(rids)))
    pt, ct = rng.randint(16, 4096), rng.randint(1, 128)
    return (
        f"[{ts}] Finish: obj=GenerateReqInput(rid='{rid}'), out={{'text': '{_prompt(rng, 2, 5)}', "
        f"'meta_info': {{'id': '{rid}', 'finish_reason': {{'type': 'length', 'length': {ct}}}, "
        f"'prompt_tokens': {pt}, 'completion_tokens': {ct}, 'cached_tokens': 0, 'e2e_latency': {rng.uniform(0.2, 9):.3f}}}}}"
    )


# The shapes of a real busy SGLang server (sglang==0.5.2), each with its weight:
# * decode lines from every DP rank of an 8-way DP-attention node, "[ts DPk TPk EPk]"
#   (scheduler_metrics_mixin.py:199-221), the trailing ", " stripped on 50 of 82 decode lines
#   (shared/corpus/real), as log collectors do;
# * log_requests at the default level 2 (server_args.py:197; tokenizer_manager.py:351, :687,
#   :982): "Receive: obj=GenerateReqInput(...)" with every field of the dataclass
#   (io_struct.py:65, chat-templated text), "Finish: obj=..., out={'text': ..., 'output_ids':
#   [...], 'meta_info': {...}}" (tokenizer_manager.py:1202-1245);
# * uvicorn access lines for traffic, health probes and metric scrapes.
_REAL_WEIGHTS = (("uvicorn", 0.45), ("decode", 0.30), ("prefill", 0.07), ("receive", 0.09))
_STRIPPED = 50 / 82
_REQ_FIELDS = (
    "input_ids=None, input_embeds=None, image_data=None, video_data=None, audio_data=None, "
    "sampling_params={{'max_new_tokens': {mnt}, 'temperature': 0.7, 'top_p': 0.95}}, "
    "rid='{rid}', return_logprob=False, logprob_start_len=-1, top_logprobs_num=0, "
    "token_ids_logprob=None, return_text_in_logprobs=False, stream={stream}, log_metrics=True, "
    "return_hidden_states=False, modalities=None, session_params=None, lora_path=None, "
    "lora_id=None, custom_logit_processor=None, bootstrap_host=None, bootstrap_port=None, "
    "bootstrap_room=None, bootstrap_pair_key=None, data_parallel_rank=None, background=False, "
    "conversation_id=None, label=None, priority=None, return_bytes=False"
)


def _chat(rng: random.Random, lo: int, hi: int) -> str:
    return (
        "<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n<|im_start|>user\\n"
        + _prompt(rng, lo, hi)
        + "<|im_end|>\\n<|im_start|>assistant\\n"
    )


def _sglang_real(rng: random.Random, ts: str, rids: list[str], running: int, queue: int) -> str:
    x = rng.random()
    kind = next((k for k, w in _REAL_WEIGHTS if (x := x - w) < 0), "finish")
    if kind == "uvicorn":
        port = rng.randint(30000, 65000)
        y = rng.random()
        if y < 0.6:
            return f'[{ts}] INFO:     10.0.{rng.randint(0, 9)}.{rng.randint(1, 250)}:{port} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
        if y < 0.9:
            return f'[{ts}] INFO:     127.0.0.1:{port} - "GET /health HTTP/1.1" 200 OK'
        return f'[{ts}] INFO:     10.1.0.7:{port} - "GET /metrics HTTP/1.1" 200 OK'
    dp = rng.randrange(8)
    head = f"[{ts} DP{dp} TP{dp} EP{dp}]"
    tail = "," if rng.random() < _STRIPPED else ", "
    if kind == "decode":
        bs = max(1, running // 8 + rng.randint(-3, 3))
        tok = bs * rng.randint(300, 900)
        return (
            f"{head} Decode batch. #running-req: {bs}, #token: {tok}, token usage: {tok / 981344:.2f}, "
            f"cuda graph: {bs <= 160}, gen throughput (token/s): {bs * rng.uniform(20, 40):.2f}, "
            f"#queue-req: {queue}{tail}"
        )
    if kind == "prefill":
        new_seq = rng.randint(1, 4)
        return (
            f"{head} Prefill batch. #new-seq: {new_seq}, #new-token: {new_seq * rng.randint(64, 2048)}, "
            f"#cached-token: {rng.randint(0, 512)}, token usage: {rng.uniform(0, 0.9):.2f}, "
            f"#running-req: {running // 8}, #queue-req: {queue}{tail}"
        )
    mnt = rng.choice((128, 256, 512))
    if kind == "receive" or not rids:
        rid = f"{rng.getrandbits(128):032x}"
        rids.append(rid)
        if len(rids) > 512:
            del rids[: len(rids) - 512]
        fields = _REQ_FIELDS.format(mnt=mnt, rid=rid, stream=rng.random() < 0.7)
        return f"[{ts}] Receive: obj=GenerateReqInput(text='{_chat(rng, 4, 30)}', {fields})"
    rid = rids.pop(rng.randrange(len(rids)))
    pt, ct = rng.randint(16, 4096), rng.randint(1, mnt)
    fields = _REQ_FIELDS.format(mnt=mnt, rid=rid, stream=False)
    ids = ", ".join(str(rng.randrange(151_000)) for _ in range(min(ct, 64)))
    reason = (
        f"{{'type': 'length', 'length': {ct}}}"
        if ct == mnt
        else "{'type': 'stop', 'matched': 151645}"
    )
    return (
        f"[{ts}] Finish: obj=GenerateReqInput(text='{_chat(rng, 4, 30)}', {fields}), "
        f"out={{'text': '{_prompt(rng, 4, 30)}', 'output_ids': [{ids}], 'meta_info': {{'id': '{rid}', "
        f"'finish_reason': {reason}, 'prompt_tokens': {pt}, 'weight_version': 'default', "
        f"'completion_tokens': {ct}, 'cached_tokens': {rng.randint(0, pt)}, "
        f"'e2e_latency': {rng.uniform(0.2, 9):.3f}}}}}"
    )


# ----------------------------------------------------------------------------- vLLM
_VLLM_SIZES = [1, 2, 4] + list(range(8, 257, 8))


def _vllm_startup(ts: str, restart_no: int) -> list[str]:
    api, core = f"(APIServer pid={900 + restart_no})", f"(EngineCore_DP0 pid={1100 + restart_no})"
    sizes = ",".join(str(s) for s in reversed(_VLLM_SIZES))
    return [
        f"{api} INFO {ts} [api_server.py:1885] vLLM API server version 0.11.0",
        f"{api} INFO {ts} [utils.py:233] non-default args: {{'model_tag': 'Qwen/Qwen3-8B', 'host': '0.0.0.0', "
        f"'port': {8000 + restart_no}, 'model': 'Qwen/Qwen3-8B', 'max_num_seqs': 256, 'gpu_memory_utilization': 0.9}}",
        f"{core} INFO {ts} [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: model='Qwen/Qwen3-8B', "
        f"speculative_config=None, tokenizer='Qwen/Qwen3-8B', dtype=torch.bfloat16, max_seq_len=40960, "
        f"tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, enforce_eager=False, "
        f"kv_cache_dtype=auto, enable_prefix_caching=True, chunked_prefill_enabled=True, "
        f'compilation_config={{"level":3,"cudagraph_mode":[2,1],"use_cudagraph":true,'
        f'"cudagraph_num_of_warmups":1,"cudagraph_capture_sizes":[{sizes}],"max_capture_size":256}}',
        f"{core} INFO {ts} [gpu_model_runner.py:2602] Starting to load model Qwen/Qwen3-8B...",
        f"{core} INFO {ts} [gpu_model_runner.py:2634] Model loading took 15.2683 GiB and 4.512 seconds",
        f"{core} INFO {ts} [gpu_worker.py:298] Available KV cache memory: 51.42 GiB",
        f"{core} INFO {ts} [kv_cache_utils.py:864] GPU KV cache size: 374,416 tokens",
        f"{core} INFO {ts} [kv_cache_utils.py:868] Maximum concurrency for 40,960 tokens per request: 9.14x",
        f"{core} Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 35/35 [00:04<00:00,  8.31it/s]",
        f"{core} Capturing CUDA graphs (decode, FULL): 100%|##########| 35/35 [00:02<00:00, 13.02it/s]",
        f"{core} INFO {ts} [gpu_model_runner.py:3480] Graph capturing finished in 7 secs, took 0.61 GiB",
        f"{core} INFO {ts} [core.py:210] init engine (profile, create kv cache, warmup model) took 41.97 seconds",
        f"{api} INFO {ts} [api_server.py:1947] Starting vLLM API server 0 on http://0.0.0.0:{8000 + restart_no}",
        f"{api} INFO:     Started server process [{900 + restart_no}]",
        f"{api} INFO:     Waiting for application startup.",
        f"{api} INFO:     Application startup complete.",
    ]


# one request rejected for its length while the engine goes on serving (no engine-dead line:
# vLLM prints "EngineCore encountered an issue" only when the core itself died)
_VLLM_TRACEBACK = """{api} ERROR {ts} [serving_completion.py:160] Error in preprocessing prompt inputs
{api} ERROR {ts} [serving_completion.py:160] Traceback (most recent call last):
{api} ERROR {ts} [serving_completion.py:160]   File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/serving_completion.py", line 152, in create_completion
{api} ERROR {ts} [serving_completion.py:160]     engine_prompts = await self._preprocess_completion(
{api} ERROR {ts} [serving_completion.py:160] ValueError: This model's maximum context length is 40960 tokens. However, you requested 41200 tokens."""


def vllm_lines(
    target_bytes: int, seed: int = 0, restarts: int = 0, tracebacks: int = 1
) -> Iterator[str]:
    """Lines of a vLLM (V1, DEBUG step lines on) log of about ``target_bytes``."""
    rng = random.Random(seed)
    clock = _Clock(
        datetime(2025, 10, 18, 9, 0, tzinfo=timezone.utc).timestamp(), 0.004, sglang=False
    )
    written = 0
    restart_at = sorted(rng.uniform(0.2, 0.9) * target_bytes for _ in range(restarts))
    tb_at = sorted(rng.uniform(0.05, 0.95) * target_bytes for _ in range(tracebacks))
    for line in _vllm_startup(clock.tick(rng), 0):
        written += len(line) + 1
        yield line
    running, waiting, restart_no = 40, 0, 0
    while written < target_bytes:
        ts = clock.tick(rng)
        api, core = (
            f"(APIServer pid={900 + restart_no})",
            f"(EngineCore_DP0 pid={1100 + restart_no})",
        )
        if restart_at and written >= restart_at[0]:
            restart_at.pop(0)
            restart_no += 1
            block = _vllm_startup(ts, restart_no)
        elif tb_at and written >= tb_at[0]:
            tb_at.pop(0)
            block = _VLLM_TRACEBACK.format(ts=ts, api=api, core=core).split("\n")
        else:
            block = [_vllm_steady(rng, ts, api, core, running, waiting)]
            if "Avg prompt throughput" in block[0]:  # its iteration line (no draw: same stream)
                block.append(_vllm_iteration(ts, api, len(block[0]), running, waiting))
            if rng.random() < 0.02:
                running = max(1, min(256, running + rng.randint(-12, 12)))
                waiting = max(0, waiting + rng.randint(-5, 5)) if running > 200 else 0
        for line in block:
            written += len(line) + 1
            yield line


def _vllm_iteration(ts: str, api: str, n: int, running: int, waiting: int) -> str:
    """An ``--enable-logging-iteration-details`` line (vllm==0.34.0:vllm/v1/metrics/
    loggers.py:199-216), the two shapes alternating (0.20's core.py line ends at the time)."""
    ctx = waiting % 3
    head = f"{api} INFO {ts} [loggers.py:199] "
    line = (
        f"Iteration({n * 7 + running}): {ctx} context requests, {ctx * 517} context tokens, "
        f"{running} generation requests, {running} generation tokens, "
        f"iteration elapsed time: {running * 0.37:.2f} ms"
    )
    if n % 2:
        return head + line
    return head + f"Engine 000: {line}, GPU KV cache usage: {n % 100:.1f}%"


def _vllm_steady(
    rng: random.Random, ts: str, api: str, core: str, running: int, waiting: int
) -> str:
    x = rng.random()
    if x < 0.40:
        port = rng.randint(30000, 65000)
        y = rng.random()
        if y < 0.5:
            return f'{api} INFO:     10.0.{rng.randint(0, 9)}.{rng.randint(1, 250)}:{port} - "POST /v1/completions HTTP/1.1" 200 OK'
        if y < 0.85:
            return f'{api} INFO:     127.0.0.1:{port} - "GET /health HTTP/1.1" 200 OK'
        return f'{api} INFO:     10.1.0.7:{port} - "GET /metrics HTTP/1.1" 200 OK'
    if x < 0.77:  # DEBUG step line, one per forward
        n = max(1, running + rng.randint(-3, 3))
        if n <= 256 and rng.random() < 0.9:
            padded = next(s for s in _VLLM_SIZES if s >= n)
            return (
                f"{core} DEBUG {ts} [v1/worker/gpu_model_runner.py:2931] Running batch with cudagraph_mode: FULL, "
                f"batch_descriptor: BatchDescriptor(num_tokens={padded}, num_reqs={padded}, uniform=True, "
                f"has_lora=False), should_ubatch: False, num_tokens_across_dp: None"
            )
        tokens = n + rng.randint(100, 4000)
        return (
            f"{core} DEBUG {ts} [v1/worker/gpu_model_runner.py:2931] Running batch with cudagraph_mode: PIECEWISE, "
            f"batch_descriptor: BatchDescriptor(num_tokens={tokens}, num_reqs=None, uniform=False, "
            f"has_lora=False), should_ubatch: False, num_tokens_across_dp: None"
        )
    if x < 0.80:
        return (
            f"{api} INFO {ts} [loggers.py:123] Engine 000: Avg prompt throughput: {rng.uniform(0, 9000):.1f} tokens/s, "
            f"Avg generation throughput: {rng.uniform(100, 3000):.1f} tokens/s, Running: {running} reqs, "
            f"Waiting: {waiting} reqs, GPU KV cache usage: {rng.uniform(0, 99):.1f}%, "
            f"Prefix cache hit rate: {rng.uniform(0, 60):.1f}%"
        )
    rid = f"cmpl-{rng.getrandbits(128):032x}-0"
    if x < 0.90:
        return (
            f"{api} INFO {ts} [logger.py:49] Received request {rid}: params: SamplingParams(n=1, "
            f"temperature=0.7, top_p=0.95, max_tokens={rng.choice((64, 128, 256))}), lora_request: None."
        )
    return f"{api} INFO {ts} [async_llm.py:327] Added request {rid}."


# The shapes of a busy vLLM V1 server with request logging and DEBUG step lines
# (``--enable-log-requests``, ``VLLM_LOGGING_LEVEL=DEBUG``, ``--cudagraph-metrics``), each with
# its weight per steady-state line (``_VL_REAL_WEIGHTS``); the formats are those of
# shared/formats/vllm-log-formats.md (sections 1, R-2', R-3, 7.2 and 8) and vllm==0.33.0:
# * the process prefix of each era (section 1.2): ``(APIServer pid=N)`` for the front end
#   (stats, request and uvicorn lines), the engine core ``(EngineCore_DP0 pid=N)`` (0.10.2+)
#   or ``(EngineCore pid=N)`` (0.18+), the model-running processes ``(Worker_TP0 pid=N)`` /
#   ``(Worker_TP1 pid=N)`` at TP=2 (each writes its own step line), the engine core at TP=1;
# * DEBUG ``Running batch with cudagraph_mode: ...`` once per forward step and per model
#   process (R-2', vllm/v1/worker/gpu_model_runner.py:4009): FULL for a pure decode batch
#   padded to the next capture size, PIECEWISE for a mixed batch within the largest capture
#   size, NONE (eager, the unpadded count) above it; the ``BatchDescriptor`` repr of each era
#   (``num_active_loras=0`` in 0.33: vllm/forward_context.py:29-50, a dataclass);
# * ``Engine 000: Avg prompt throughput: ...`` stats lines every 10 s (7.2, assembled from
#   parts in 0.11.1+: vllm/v1/metrics/loggers.py:280-336, ``Preemptions: N`` only when some
#   happened), each followed (``--cudagraph-metrics``, the 0.33 run) by the CUDAGraph metrics table (R-3,
#   vllm/compilation/cuda_graph.py:56-118): a multi-line record, so every line but the last
#   ends in ``\r`` before the newline (vllm/logging_utils/formatter.py: ``"\n"`` becomes
#   ``"\r\n" + header``), cells padded with blanks, and the last line an empty message (the
#   header and its trailing blank);
# * ``Received request chatcmpl-<hex>: params: SamplingParams(...), lora_request: None.``
#   (8, 0.12+: vllm/entrypoints/serve/utils/request_logger.py:66, the repr of
#   vllm/sampling_params.py:1447), some with stop strings (quotes, ``<|im_end|>``), and
#   ``Added request <id>-<8 hex>.`` (vllm/v1/engine/async_llm.py:587,
#   input_processor.py:371);
# * uvicorn access lines for traffic, health probes and metric scrapes.
# Not drawn: the 0.10-0.11 request form with ``prompt_token_ids`` (read per line by design:
# the bulk row has no prompt token count) and ANSI-coloured prefixes (a whole log is coloured
# or not; ``VLLM_LOGGING_COLOR``).
_VL_REAL_WEIGHTS = (
    ("step", 0.536),
    ("uvicorn", 0.22),
    ("received", 0.12),
    ("added", 0.124),
)
#: the front end logs its stats every VLLM_LOG_STATS_INTERVAL seconds of log time (default
#: 10.0; formats/vllm-log-formats.md 7.2), not as a share of the lines
_VL_STATS_EVERY = 10.0
_VL_MAX_CAPTURE = 512
_VL_REAL_SIZES = [1, 2, 4] + list(range(8, _VL_MAX_CAPTURE + 1, 8))


@dataclass(frozen=True)
class _VlEra:
    """What differs between the vLLM versions of one log's runs (one era per run)."""

    version: str
    core: str  # the engine core's process name
    tp: int  # model processes writing step lines: Worker_TPk at tp > 1, else the core
    loras: bool  # BatchDescriptor has num_active_loras
    metrics: bool  # --cudagraph-metrics: the table after each stats line


_VL_ERAS = (
    _VlEra("0.13.0", "EngineCore_DP0", 2, False, False),
    _VlEra("0.33.0", "EngineCore", 1, True, True),
)


def _vl_real_startup(ts: str, era: _VlEra, pid: int) -> list[str]:
    """A start-up in ``era``'s prefixes (the generated start-up's lines, re-prefixed)."""
    sizes = ", ".join(str(s) for s in _VL_REAL_SIZES)
    api, core = f"(APIServer pid={pid})", f"({era.core} pid={pid + 1})"
    lines = _vllm_startup(ts, 0)
    lines = [
        ln.replace("(APIServer pid=900)", api)
        .replace("(EngineCore_DP0 pid=1100)", core)
        .replace("v0.11.0", f"v{era.version}")
        .replace("version 0.11.0", f"version {era.version}")
        for ln in lines
    ]
    lines.insert(
        -3,
        f"{api} INFO {ts} [compilation/cuda_graph.py:108] CUDAGraph capture sizes: [{sizes}]",
    )
    return lines


def _vl_table(head: str, rows: list[tuple[int, int, str, int]]) -> list[str]:
    """The CUDAGraph metrics record (R-3): one line per table line, each with the header."""
    sizes = str(_VL_REAL_SIZES)
    cols = ("Unpadded Tokens", "Padded Tokens", "Num Paddings", "Runtime Mode", "Count")
    cells = [(str(u), str(p), str(p - u), m, str(c)) for u, p, m, c in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(cols)]

    def row(values: tuple[str, ...]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    text = [
        "**CUDAGraph Config Settings:**",
        "",
        "- Mode: FULL_AND_PIECEWISE",
        f"- Capture sizes: {sizes}",
        "",
        "**CUDAGraph Stats:**",
        "",
        row(cols),
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
        *(row(c) for c in cells),
        "",
    ]
    return [f"{head}{t}\r" for t in text[:-1]] + [head]


def _vl_descriptor(era: _VlEra, tokens: int, reqs: int | None, uniform: bool) -> str:
    loras = ", num_active_loras=0" if era.loras else ""
    return (
        f"BatchDescriptor(num_tokens={tokens}, num_reqs={reqs}, uniform={uniform}, "
        f"has_lora=False{loras})"
    )


def _sampling_params(rng: random.Random, max_tokens: int) -> str:
    stop = "['<|im_end|>', '</s>']" if rng.random() < 0.1 else "[]"
    return (
        f"SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, "
        f"repetition_penalty=1.0, temperature={rng.choice((0.0, 0.6, 0.7, 1.0))}, "
        f"watermarking=None, top_p={rng.choice((0.8, 0.95, 1.0))}, top_k=0, min_p=0.0, "
        f"seed=None, stop={stop}, stop_token_ids=[], bad_words=[], "
        f"thinking_token_budget=None, include_stop_str_in_output=False, ignore_eos=False, "
        f"max_tokens={max_tokens}, min_tokens=0, logprobs=None, prompt_logprobs=None, "
        f"skip_special_tokens=True, spaces_between_special_tokens=True, "
        f"structured_outputs=None, extra_args=None)"
    )


def vllm_real_lines(
    target_bytes: int, seed: int = 0, restarts: int = 0, tracebacks: int = 1
) -> Iterator[str]:
    """Lines of a vLLM V1 log of about ``target_bytes`` in the shapes of real busy servers
    (the comment above ``_VL_REAL_WEIGHTS``); run k is in era ``_VL_ERAS[k % 2]``."""
    rng = random.Random(seed)
    clock = _Clock(datetime(2026, 3, 8, 9, 0, tzinfo=timezone.utc).timestamp(), 0.004, False)
    written = 0
    restart_at = sorted(rng.uniform(0.2, 0.9) * target_bytes for _ in range(restarts))
    tb_at = sorted(rng.uniform(0.05, 0.95) * target_bytes for _ in range(tracebacks))
    run, pid = 0, 1000
    era = _VL_ERAS[0]
    for line in _vl_real_startup(clock.tick(rng), era, pid):
        written += len(line) + 1
        yield line
    running, waiting = 40, 0
    pending: list[str] = []  # received, not yet added
    steps: dict[tuple[int, int, str], int] = {}  # the metrics table since the last stats
    next_stats = clock.t + _VL_STATS_EVERY
    while written < target_bytes:
        ts = clock.tick(rng)
        api, core = f"(APIServer pid={pid})", f"({era.core} pid={pid + 1})"
        if restart_at and written >= restart_at[0]:
            restart_at.pop(0)
            run, pid = run + 1, pid + 100
            era = _VL_ERAS[run % len(_VL_ERAS)]
            block = _vl_real_startup(ts, era, pid)
        elif tb_at and written >= tb_at[0]:
            tb_at.pop(0)
            block = _VLLM_TRACEBACK.format(ts=ts, api=api, core=core).split("\n")
        else:
            x = rng.random()
            kind = next((k for k, w in _VL_REAL_WEIGHTS if (x := x - w) < 0), "step")
            if clock.t >= next_stats:
                kind, next_stats = "stats", clock.t + _VL_STATS_EVERY
            elif kind == "added" and not pending:
                kind = "received"
            if kind == "step":
                block, key = _vl_step(rng, ts, era, core, pid, running)
                steps[key] = steps.get(key, 0) + 1
            else:
                block = _vl_real_steady(rng, kind, ts, api, running, waiting)
            if kind == "received":
                pending.append(block[0].split("Received request ", 1)[1].split(":", 1)[0])
            elif kind == "added":
                rid = pending.pop(0)
                block = [
                    f"{api} INFO {ts} [v1/engine/async_llm.py:587] Added request {rid}-{rng.getrandbits(32):08x}."
                ]
            elif kind == "stats":
                rows = sorted(steps.items(), key=lambda kv: -kv[1])
                block += (
                    _vl_table(
                        f"{api} INFO {ts} [compilation/cuda_graph.py:123] ",
                        [(u, p, m, c) for (u, p, m), c in rows],
                    )
                    if era.metrics and rows
                    else []
                )
                steps.clear()
            if rng.random() < 0.02:
                running = max(1, min(_VL_MAX_CAPTURE + 200, running + rng.randint(-24, 24)))
                waiting = max(0, waiting + rng.randint(-5, 5)) if running > 256 else 0
        for line in block:
            written += len(line) + 1
            yield line


def _vl_real_steady(
    rng: random.Random, kind: str, ts: str, api: str, running: int, waiting: int
) -> list[str]:
    """One steady-state line of the front end (uvicorn, request, stats)."""
    if kind == "uvicorn":
        port = rng.randint(30000, 65000)
        y = rng.random()
        if y < 0.6:
            return [
                f'{api} INFO:     10.0.{rng.randint(0, 9)}.{rng.randint(1, 250)}:{port} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
            ]
        if y < 0.9:
            return [f'{api} INFO:     127.0.0.1:{port} - "GET /health HTTP/1.1" 200 OK']
        return [f'{api} INFO:     10.1.0.7:{port} - "GET /metrics HTTP/1.1" 200 OK']
    if kind == "received":
        rid = f"chatcmpl-{rng.getrandbits(128):032x}"
        params = _sampling_params(rng, rng.choice((256, 1024, 4096, 32000)))
        return [
            f"{api} INFO {ts} [entrypoints/serve/utils/request_logger.py:66] Received request "
            f"{rid}: params: {params}, lora_request: None."
        ]
    if kind == "stats":
        parts = [
            f"Avg prompt throughput: {rng.uniform(0, 9000):.1f} tokens/s",
            f"Avg generation throughput: {rng.uniform(100, 3000):.1f} tokens/s",
            f"Running: {running} reqs",
            f"Waiting: {waiting} reqs",
        ]
        if waiting and rng.random() < 0.3:
            parts.append(f"Preemptions: {rng.randint(1, 9)}")
        parts += [
            f"GPU KV cache usage: {rng.uniform(0, 99):.1f}%",
            f"Prefix cache hit rate: {rng.uniform(0, 60):.1f}%",
        ]
        return [f"{api} INFO {ts} [v1/metrics/loggers.py:336] Engine 000: " + ", ".join(parts)]
    return []  # added: the caller fills it (it holds the received ids)


def _vl_step(
    rng: random.Random, ts: str, era: _VlEra, core: str, pid: int, running: int
) -> tuple[list[str], tuple[int, int, str]]:
    """One forward step, logged by every model process; its metrics-table key (unpadded,
    padded, mode)."""
    n = max(1, running + rng.randint(-3, 3))
    where = f"DEBUG {ts} [v1/worker/gpu_model_runner.py:4009] Running batch with cudagraph_mode: "
    tail = ", should_ubatch: False, num_tokens_across_dp: None"
    if n <= _VL_MAX_CAPTURE and rng.random() < 0.85:
        padded = next(s for s in _VL_REAL_SIZES if s >= n)
        msg = f"FULL, batch_descriptor: {_vl_descriptor(era, padded, padded, True)}{tail}"
        unpadded = n
    else:
        tokens = n + rng.randint(16, 4000)
        if tokens <= _VL_MAX_CAPTURE:
            padded = next(s for s in _VL_REAL_SIZES if s >= tokens)
            msg = f"PIECEWISE, batch_descriptor: {_vl_descriptor(era, padded, None, False)}{tail}"
            unpadded = tokens
        else:
            msg = f"NONE, batch_descriptor: {_vl_descriptor(era, tokens, None, False)}{tail}"
            unpadded = padded = tokens
    procs = [f"(Worker_TP{k} pid={pid + 2 + k})" for k in range(era.tp)] if era.tp > 1 else [core]
    mode = msg.split(",", 1)[0]
    return [f"{p} {where}{msg}" for p in procs], (unpadded, padded, mode)


# ----------------------------------------------------------------------------- files
def write_log(path: Path, lines: Iterable[str]) -> int:
    """Write lines buffered; returns the number of lines."""
    n = 0
    buf: list[str] = []
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for line in lines:
            buf.append(line)
            n += 1
            if len(buf) >= 20000:
                fh.write("\n".join(buf) + "\n")
                buf.clear()
        if buf:
            fh.write("\n".join(buf) + "\n")
    return n


def sglang_real_lines(target_bytes: int, **kw: object) -> Iterator[str]:
    """``sglang_lines`` in the shapes of real logs."""
    return sglang_lines(target_bytes, real=True, **kw)  # type: ignore[arg-type]


GENERATORS: dict[str, Callable[..., Iterator[str]]] = {
    "sglang": sglang_lines,
    "vllm": vllm_lines,
    "sglang-real": sglang_real_lines,
    "vllm-real": vllm_real_lines,
}


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - manual use
    import argparse

    ap = argparse.ArgumentParser(
        description="Write a synthetic serving log (deterministic) for the benchmark.",
        epilog="example: python bench/gen_logs.py sglang-real 700e6 /tmp/sglang.log",
    )
    ap.add_argument("kind", choices=sorted(GENERATORS), help="which engine and line shapes")
    ap.add_argument("size", type=float, help="approximate size in bytes (700e6 = 700 MB)")
    ap.add_argument("out", type=Path, help="the log file to write")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    n = write_log(args.out, GENERATORS[args.kind](int(args.size)))
    took = time.perf_counter() - t0
    print(f"{args.out}: {n} lines, {args.out.stat().st_size / 1e6:.0f} MB in {took:.1f}s")


if __name__ == "__main__":  # pragma: no cover
    main()

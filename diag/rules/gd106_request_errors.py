"""GD106 request-errors."""

from __future__ import annotations

from diag.rules.base import Remedy, Rule
from diag.rules.metrics import RunMetrics


def _kinds(m: RunMetrics) -> set[str]:
    return {k for k, _ in m.errors.request_errors.kinds} if m.errors.request_errors else set()


class GD106(Rule):
    """Single requests failed while the server went on serving: a prompt longer than the
    context, a malformed body, a client gone, one handler's traceback. Each is one client's
    request, not an outage, so this is information, never an error; the run's verdict stands
    on the engine's own state (GD105 is for the engine failing).

    Judgement: an error is one request's when the server was serving before it, it is no
    follow-on of a dead engine, its text names no engine failure (CUDA, NCCL, a dead engine
    core or scheduler), and its innermost deciding frame is the request layer's (vLLM's
    OpenAI serving handlers, renderer and input processor, SGLang's http_server and
    tokenizer manager, uvicorn's run_asgi: phases.yaml ``request`` rows) or its text is one
    the engines' HTTP layers print for one request (data/request_scope.yaml, cited there).

    Condition: the run's facts count at least one request error (facts/request_errors.py).

    Fires::

        [2025-06-10 08:00:00] server_args=ServerArgs(model_path='m', tp_size=1, cuda_graph_max_bs=8)
        [2025-06-10 08:00:05] Capture cuda graph begin. This can take up to several minutes. avail mem=10.00 GB
        [2025-06-10 08:00:08] Capture cuda graph end. Time elapsed: 3.10 s. mem usage=0.40 GB. avail mem=9.60 GB.
        [2025-06-10 08:00:09] The server is fired up and ready to roll!
        [2025-06-10 08:00:10 TP0] Decode batch. #running-req: 4, #token: 800, token usage: 0.01, cuda graph: True, gen throughput (token/s): 300.00, #queue-req: 0,
        [2025-06-10 08:00:11] Error in request handler
        Traceback (most recent call last):
          File "/usr/lib/python3/site-packages/sglang/srt/managers/tokenizer_manager.py", line 627, in _validate_one_request
        ValueError: The input (131200 tokens) is longer than the model's context length (131072 tokens).
        [2025-06-10 08:00:12 TP0] Decode batch. #running-req: 4, #token: 808, token usage: 0.01, cuda graph: True, gen throughput (token/s): 300.00, #queue-req: 0,

    Near miss (a server that captured and served with no request failing)::

        incident: sglang-healthy
    """

    code = "GD106"
    name = "request-errors"
    severity = "info"
    trigger = "single requests failed while the server went on serving (counted, not an outage)"
    impact = 5
    evidence = "request_errors"
    reads = ("errors.request_errors",)
    remedies = (
        Remedy(
            "Have clients keep prompt plus max tokens under the model's context length (or "
            "truncate them); the server rejected only those requests.",
            when=lambda m: "context_length" in _kinds(m),
        ),
        Remedy(
            "Nothing to change on the server for these: look at the requests that failed (first "
            "and last are cited) if a client keeps sending them.",
        ),
    )

    def fires(self, m: RunMetrics) -> bool:
        return m.errors.request_errors is not None

    def message(self, m: RunMetrics) -> str:
        r = m.errors.request_errors
        assert r is not None
        went_on = "; the server went on serving" if r.served_after else ""
        first = f": {r.first.message.rstrip('.')}" if r.first.message else ""
        return f"{r.summary()}{first}{went_on}"

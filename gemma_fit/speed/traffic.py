"""Traffic a server holds: concurrent requests of P prompt and G output tokens, closed-loop or at a request rate.

The engine is a batched decoder (batch.Pipeline: seconds per step at B sequences) plus a prefill rate
(prompt tokens/s while prefilling). Both llama-server's slots and vLLM's continuous batching interleave
new prompts with the running decode steps; the time a server spends prefilling is taken out of decoding:
- closed loop (N users, each sending the next request when the last one is answered; `vllm bench serve
  --max-concurrency N`, llama-server with -np N slots all busy): one round serves N requests in
  N x P / prefill rate + G x step(N) seconds, so aggregate output tokens/s = N x G / that round (for vLLM and
  transformers the N prompts share their prefill chunks: the prefill rate is that of N x P tokens together);
- open loop (requests arrive at R per second, Poisson): prefill takes a share f = R x P / prefill rate of the
  server's time; the decode batch B grows until B / step(B) x (1 - f) = R x G (Little's law). The time to
  first token waits for the prompts ahead of it: an M/D/1 queue whose server is the prefill, slowed by the
  decode steps it shares the GPU with. Its waiting-time percentiles use the exponential tail of the
  heavy-traffic approximation (P(wait > t) = rho x exp(-t / mean conditional wait)), an approximation the
  notes name.
A server "holds" a rate while it runs at most HEADROOM of its capacity: queues grow without bound at 100%,
so that share is the margin. Past it, replicas = ceil(rate / (HEADROOM x capacity of one)).
"""

from __future__ import annotations

import math

from gemma_fit.base.record import record
from gemma_fit.speed.batch import Pipeline

HEADROOM = 0.85  # the most of its capacity a server is planned to run at (the margin the answer keeps)


@record
class Traffic:
    """What a user asks of a server beyond one chat: output tokens per request and a request rate."""

    output_tokens: int | None = None  # None: decode throughput only
    rate_per_s: float | None = None  # None: closed loop at --parallel N


@record
class LoadPoint:
    prompt_tokens: int
    output_tokens: int
    concurrency: int = 1  # closed loop: requests in flight
    rate_per_s: float | None = None  # open loop: requests per second (None: closed loop)


@record
class ClosedLoop:
    concurrency: int
    aggregate_tokens_per_s: float  # output tokens/s of all requests together, prefill included
    decode_tokens_per_s: float  # all sequences together while only decoding (no prefill in between)
    per_user_tokens_per_s: float  # one request's output tokens/s while it generates
    ttft_s: float  # its own prefill, the prompts of the others in flight interleaved, and its first token
    request_s: float  # one request, first token to last
    bound: str  # memory | compute


def closed_loop(pipe: Pipeline, prefill_tps: float, w: LoadPoint) -> ClosedLoop:
    n, p, g = max(1, w.concurrency), w.prompt_tokens, max(1, w.output_tokens)
    step = pipe.step_s(n)
    prefill_round = n * p / prefill_tps if prefill_tps else float("inf")
    round_s = prefill_round + g * step
    # A request's decode shares its round with the others' prompts: per user, G tokens in the round less
    # its own prefill; its first token waits for its own prompt and, on average, half of the others'.
    own = p / prefill_tps if prefill_tps else float("inf")
    ttft = own + (n - 1) * own / 2 / max(1, g) + step
    return ClosedLoop(n, n * g / round_s, n / step, g / max(round_s - own, step), ttft, round_s - own,
                      pipe.bound(n))


@record
class OpenLoop:
    rate_per_s: float
    capacity_per_s: float  # the most requests/s one server completes (at its largest batch)
    utilisation: float  # the share of the server's time the traffic takes
    holds: bool  # utilisation within HEADROOM and the KV cache holds the batch it needs
    batch: int  # sequences decoding at once
    per_user_tokens_per_s: float
    aggregate_tokens_per_s: float  # output tokens/s (= rate x G when it holds)
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    replicas: int  # servers like this one that hold the rate with the margin
    reason: str


def _prefill_share(rate: float, p: int, prefill_tps: float) -> float:
    return rate * p / prefill_tps if prefill_tps else float("inf")


def capacity_per_s(pipe: Pipeline, prefill_tps: float, w: LoadPoint, max_batch: int) -> float:
    """Requests/s one server completes when full: each costs its prefill and G steps' share at max_batch."""
    b = max(1, max_batch)
    per_request = w.prompt_tokens / prefill_tps + max(1, w.output_tokens) * pipe.step_s(b) / b
    return 1.0 / per_request if per_request > 0 else 0.0


def _wait_quantile(rho: float, service: float, q: float) -> float:
    """M/D/1 waiting time at quantile q: no wait with probability 1 - rho, else an exponential tail whose mean
    matches the Pollaczek-Khinchine mean (rho x service / (2 (1 - rho))) divided by rho."""
    if rho <= 0 or 1 - q >= rho:
        return 0.0
    conditional_mean = service / (2 * (1 - rho))
    return conditional_mean * math.log(rho / (1 - q))


def open_loop(pipe: Pipeline, prefill_tps: float, w: LoadPoint, max_batch: int) -> OpenLoop:
    """A Poisson stream of w.rate_per_s requests against one server that batches up to max_batch sequences.

    The server's busy share is rho = R x (P / prefill rate + G / decode rate at max_batch), so it completes at most
    1 / (P / prefill + G / decode) requests/s. Below that the decode batch settles where Little's law puts it,
    B = R x G x time per output token(B); each token waits for the prefills interleaved with it."""
    rate = float(w.rate_per_s or 0.0)
    p, g = w.prompt_tokens, max(1, w.output_tokens)
    cap = capacity_per_s(pipe, prefill_tps, w, max_batch)
    rho = rate / cap if cap > 0 else float("inf")
    replicas = max(1, math.ceil(rate / (HEADROOM * cap))) if cap > 0 else 0
    if rho >= 1:
        return OpenLoop(rate, cap, rho, False, max_batch, 0.0, cap * g, None, None, replicas,
                        f"{rate:g} requests/s is past this server's capacity of {cap:.2f}/s (at {max_batch} "
                        f"sequences): queues grow without bound; {replicas} servers hold it with the margin")
    f = _prefill_share(rate, p, prefill_tps)
    batch = _settled_batch(pipe, rate * g, f, max_batch)
    tpot = pipe.step_s(batch) / max(1e-9, 1 - f)
    service = p / prefill_tps
    holds = rho <= HEADROOM
    reason = (f"the server is {rho:.0%} busy; it completes at most {cap:.2f} requests/s at {max_batch} sequences"
              + ("" if holds else f": past the {HEADROOM:.0%} planned, {replicas} servers keep the margin"))
    step = pipe.step_s(batch)
    return OpenLoop(rate, cap, rho, holds, batch, 1.0 / tpot, rate * g,
                    _wait_quantile(rho, service, 0.50) + service + step,
                    _wait_quantile(rho, service, 0.95) + service + step, replicas, reason)


def _settled_batch(pipe: Pipeline, token_rate: float, prefill_share: float, max_batch: int) -> int:
    """Sequences decoding at once in steady state: B = token rate x time per output token at B (Little's law),
    by fixed-point iteration from one sequence; at most max_batch."""
    b = 1.0
    for _ in range(100):
        nxt = min(float(max_batch), max(1.0, token_rate * pipe.step_s(math.ceil(b)) / max(1e-9, 1 - prefill_share)))
        if abs(nxt - b) < 0.01:
            break
        b = nxt
    return max(1, math.ceil(b))


@record
class Serving:
    """Many requests at once on one server: what `performance.aggregate_tokens_per_s` and `serving` report."""

    n_parallel: int  # concurrent requests (llama-server slots, vLLM max in flight, transformers' batch)
    aggregate_tokens_per_s: float  # all of them together (prefill included when output tokens are given)
    per_user_tokens_per_s: float
    bound: str  # memory | compute, at n_parallel
    max_concurrency: int | None  # requests of prompt + output tokens the KV cache holds at once (None: unknown)
    prompt_tokens: int
    output_tokens: int | None
    closed: ClosedLoop | None
    open: OpenLoop | None
    scaling: tuple[tuple[int, float, float], ...]  # (concurrency, aggregate, per user) from 1 up, decode only


SCALING_POINTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def serve(pipe: Pipeline, prefill_tps: float, n_parallel: int, prompt_tokens: int, output_tokens: int | None,
          rate_per_s: float | None, max_batch: int, max_concurrency: int | None,
          together_prefill_tps: float | None = None) -> Serving:
    """The serving answer at n_parallel concurrent requests (closed loop when output_tokens is given, pure decode
    otherwise) and, with a rate, the open-loop answer with the batch capped at max_batch. `together_prefill_tps`: the
    prompt rate when the closed loop's prompts share their prefill steps (default: one prompt's); a Poisson stream's
    prompts arrive one by one. Past what the KV cache
    holds (max_concurrency) requests wait their turn; where it holds none (a llama-server slot smaller than one
    request) the figure stays that of n_parallel sequences and the reasons say the requests do not fit."""
    n = max(1, n_parallel)
    if max_concurrency:
        n = min(n, max_concurrency)
    closed = open_ = None
    if output_tokens:
        closed = closed_loop(pipe, together_prefill_tps or prefill_tps, LoadPoint(prompt_tokens, output_tokens, n))
        aggregate, per_user = closed.aggregate_tokens_per_s, closed.per_user_tokens_per_s
    else:
        aggregate, per_user = pipe.aggregate_tokens_per_s(n), 1.0 / pipe.step_s(n)
    if rate_per_s is not None:
        open_ = open_loop(pipe, prefill_tps, LoadPoint(prompt_tokens, output_tokens or 256, n, rate_per_s), max_batch)
    points = tuple((b, pipe.aggregate_tokens_per_s(b), 1.0 / pipe.step_s(b))
                   for b in SCALING_POINTS if b <= max(n, max_batch))
    return Serving(max(1, n_parallel), aggregate, per_user, pipe.bound(n), max_concurrency, prompt_tokens,
                   output_tokens, closed, open_, points)

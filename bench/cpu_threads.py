"""torch's CPU threads on an idle and on a busy machine: the demo's training step timed with 1
thread and with torch's default (one per core), on idle cores and beside N busy-looping
processes, printed side by side in one run (why the demo-cpu preset sets ``cpu_threads: 1``).

    python bench/cpu_threads.py                 # batches 16 and 128, beside 0 and 2 busy loops
    python bench/cpu_threads.py --load 2 --steps 20 --batches 16 128

Each cell is a fresh interpreter (torch's thread pool is set once per process): MobileNet-V3
small (the demo's model, torchvision's stem) on 32x32 random images, SGD, 5 untimed steps and
then ``--steps`` timed ones; ms per step. The busy loops are stopped when the bench ends.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

STEP = r"""
import sys, time, torch, torchvision
threads, batch, steps = (int(a) for a in sys.argv[1:4])
if threads:
    torch.set_num_threads(threads)
torch.manual_seed(0)
model = torchvision.models.mobilenet_v3_small(num_classes=10)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
def step():
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
for _ in range(5):
    step()
t = time.perf_counter()
for _ in range(steps):
    step()
print(torch.get_num_threads(), 1000 * (time.perf_counter() - t) / steps)
"""


def _cell(threads: int, batch: int, steps: int) -> tuple[int, float]:
    done = subprocess.run(
        [sys.executable, "-c", STEP, str(threads), str(batch), str(steps)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    used, ms = done.stdout.split()
    return int(used), float(ms)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=int, default=2, help="busy loops for the loaded column")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 128])
    args = parser.parse_args()
    loadavg = Path("/proc/loadavg").read_text().strip()
    print(f"# cpus {os.cpu_count()}, loadavg {loadavg}")
    rows: dict[tuple[int, int, int], tuple[int, float]] = {}
    for load in (0, args.load):
        busy = [
            subprocess.Popen(["sh", "-c", "while :; do :; done"], start_new_session=True)
            for _ in range(load)
        ]
        try:
            time.sleep(0.5 if load else 0.0)
            for batch in args.batches:
                for threads in (1, 0):  # 0: torch's default
                    rows[(load, batch, threads)] = _cell(threads, batch, args.steps)
        finally:
            for proc in busy:
                proc.kill()
                proc.wait()
    print("| batch | busy loops | 1 thread (ms/step) | default: N threads (ms/step) | N / 1 |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for batch in args.batches:
        for load in (0, args.load):
            _, one = rows[(load, batch, 1)]
            n, default = rows[(load, batch, 0)]
            print(f"| {batch} | {load} | {one:.1f} | {n}: {default:.1f} | {default / one:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

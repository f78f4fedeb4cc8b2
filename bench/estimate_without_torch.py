"""PRE's fit with torch and without it (issue 48): ``wattlab estimate`` of one configuration, each
in a fresh cache folder (so each fits PRE anew), once as installed and once with torch and
torchvision blocked (as on a machine without them); prints PRE's line of each.

    PYTHONPATH=$PWD .venv/bin/python bench/estimate_without_torch.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

ARGS = ["estimate", "--model", "resnet18", "--epochs", "30", "--gpu-name", "H200"]
# torch and torchvision cannot be imported (a finder first in line refuses them), as on a
# machine without them; sys.modules[...] = None would also break scipy's check for torch arrays
BLOCK = (
    "import sys\n"
    "class NoTorch:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('torch', 'torchvision'):\n"
    "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
    "sys.meta_path.insert(0, NoTorch())\n"
)
RUN = "from wattlab.cli.app import main; sys.argv = ['wattlab', *sys.argv[1:]]; main()"


def main() -> None:
    for name, code in (("with torch", "import sys; " + RUN), ("without torch", BLOCK + RUN)):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "WATTLAB_CACHE_DIR": cache}
            done = subprocess.run([sys.executable, "-c", code, *ARGS], env=env,
                                  capture_output=True, text=True, check=False)  # fmt: skip
        print(f"== {name}: exit {done.returncode}")
        for line in (done.stdout + done.stderr).splitlines():
            if "PRE" in line or "CV error" in line or "torch" in line:
                print(line)


if __name__ == "__main__":
    main()

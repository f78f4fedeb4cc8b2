"""The synthetic tasks' parameters: version 1 (easy) and version 2 (accuracy discriminates).

Both draw one class structure (``data.py``: ten shapes, arrangements and textures) at a random
size, position and colour on a cluttered, noisy background. Version 1 is solved by every GPU
demo run (accuracy 1.000), so accuracy told configurations apart no more. Version 2 keeps the
format and the generator and makes the task graded and imperfect:

- **faint structures**: contrast against the background from 0.08 to 0.45 (v1: 0.3-0.6)
  under more pixel noise (0.10; v1: 0.06), so a model first learns the bold images and needs
  more budget, capacity or precision for the faint ones;
- **several scales**: structures of 8, 10, 12 or 15 pixels (v1: 12-18), more clutter (0-6
  specks of up to 4 pixels);
- **overlapping classes**: in 10 % of the images (train and test) the structure drawn is
  that of the class's look-alike (square/hollow square, plus/cross, disk/ring, horizontal/
  vertical bars, checkerboard/triangle) while the label stays, so no model exceeds about
  90 % test accuracy;
- **label noise**: 5 % of the training labels are replaced by a uniformly drawn class (the
  test labels keep the class of the structure's partner rule above, nothing else).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ShapesTask:
    """How one version of the synthetic task draws its images and labels."""

    version: int
    sizes: tuple[int, ...]  # structure sizes in pixels
    contrast: tuple[float, float]  # |structure colour - background| per channel
    noise_std: float  # pixel noise, in units of the 0..1 intensity range
    max_specks: int  # clutter: 0..max_specks rectangles of any colour
    speck_px: int  # of 1..speck_px pixels per side
    confusion: float  # share of images (both splits) drawn with the look-alike's structure
    label_noise: float  # share of training labels replaced by a uniformly drawn class
    seed_key: str  # names the random streams (a new version draws new images)


V1 = ShapesTask(1, (12, 15, 18), (0.3, 0.6), 0.06, 3, 3, 0.0, 0.0, "wattlab-synthetic")
V2 = ShapesTask(2, (8, 10, 12, 15), (0.08, 0.45), 0.10, 6, 4, 0.10, 0.05, "wattlab-synthetic-v2")
TASKS = {1: V1, 2: V2}
# each class's look-alike: square<->hollow square, plus<->cross, disk<->ring, bars h<->v,
# checkerboard<->triangle
LOOK_ALIKE = (1, 0, 3, 2, 5, 4, 7, 6, 9, 8)

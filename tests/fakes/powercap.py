"""Build a fake powercap sysfs tree in a temporary directory.

The layout copies the kernel's: zones live nested under ``<root>/intel-rapl/`` and
``<root>/intel-rapl:N`` / ``<root>/intel-rapl:N:M`` are symlinks to them, as in
/sys/class/powercap. Counters are plain files the test rewrites (``set_uj``, ``advance_uj``,
which wraps modulo ``max_energy_range_uj``).

Tests run as root, and root ignores file modes, so ``chmod 000`` cannot make a file unreadable.
``FakePowercap.read_text`` is a reader for the RAPL adapter's ``read_text`` seam that raises a
real ``PermissionError`` (EACCES, with the path) for denied zones — what ``open()`` raises for
a non-root user since CVE-2020-8694 — and reads the file from disk otherwise.
"""

from __future__ import annotations

import errno
from pathlib import Path

DEFAULT_MAX_RANGE_UJ = 262_143_328_850  # a common Intel value (~262 kJ)


class FakePowercap:
    """A fake /sys/class/powercap rooted at ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.denied: set[str] = set()  # zone ids whose energy_uj raises PermissionError
        self.reads: list[Path] = []
        self._paths: dict[str, Path] = {}

    # -- building ---------------------------------------------------------------------------
    def add_zone(
        self,
        zone_id: str,
        name: str,
        energy_uj: int = 0,
        max_range_uj: int = DEFAULT_MAX_RANGE_UJ,
        control_type: str = "intel-rapl",
    ) -> Path:
        """Create zone ``zone_id`` ('intel-rapl:0' or 'intel-rapl:0:2'); its parent first."""
        parts = zone_id.split(":")
        if len(parts) == 3:
            parent = self._paths[f"{parts[0]}:{parts[1]}"]
            path = parent / zone_id
        else:
            path = self.root / control_type / zone_id
        path.mkdir(parents=True)
        (path / "name").write_text(name + "\n")
        (path / "energy_uj").write_text(f"{energy_uj}\n")
        (path / "max_energy_range_uj").write_text(f"{max_range_uj}\n")
        (path / "enabled").write_text("1\n")
        link = self.root / zone_id
        link.symlink_to(path.relative_to(self.root))
        self._paths[zone_id] = path
        return path

    def add_package(
        self,
        socket: int,
        *,
        dram: bool = True,
        core: bool = True,
        uncore: bool = False,
        energy_uj: int = 0,
        max_range_uj: int = DEFAULT_MAX_RANGE_UJ,
    ) -> str:
        """Socket ``socket`` as zone intel-rapl:<socket> named package-<socket>, with the
        usual subzones (core = :0, uncore = :1, dram = :2). Returns the package zone id."""
        zone = f"intel-rapl:{socket}"
        self.add_zone(zone, f"package-{socket}", energy_uj, max_range_uj)
        if core:
            self.add_zone(f"{zone}:0", "core", energy_uj, max_range_uj)
        if uncore:
            self.add_zone(f"{zone}:1", "uncore", energy_uj, max_range_uj)
        if dram:
            self.add_zone(f"{zone}:2", "dram", energy_uj, max_range_uj)
        return zone

    def add_psys(self, index: int, energy_uj: int = 0) -> str:
        """A top-level psys zone intel-rapl:<index>."""
        zone = f"intel-rapl:{index}"
        self.add_zone(zone, "psys", energy_uj)
        return zone

    # -- counters ---------------------------------------------------------------------------
    def path(self, zone_id: str) -> Path:
        return self._paths[zone_id]

    def get_uj(self, zone_id: str) -> int:
        return int((self._paths[zone_id] / "energy_uj").read_text())

    def set_uj(self, zone_id: str, value: int) -> None:
        (self._paths[zone_id] / "energy_uj").write_text(f"{value}\n")

    def max_range_uj(self, zone_id: str) -> int:
        return int((self._paths[zone_id] / "max_energy_range_uj").read_text())

    def advance_uj(self, zone_id: str, delta_uj: int) -> None:
        """Add ``delta_uj`` to the counter, wrapping modulo max_energy_range_uj like RAPL."""
        self.set_uj(zone_id, (self.get_uj(zone_id) + delta_uj) % self.max_range_uj(zone_id))

    # -- reader seam ------------------------------------------------------------------------
    def deny(self, *zone_ids: str) -> None:
        """Make these zones' energy_uj unreadable (PermissionError) through ``read_text``."""
        self.denied.update(zone_ids)

    def read_text(self, path: Path) -> str:
        """Read a file of the tree; PermissionError for denied zones' energy_uj."""
        path = Path(path)
        self.reads.append(path)
        if path.name == "energy_uj" and path.parent.name in self.denied:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        with open(path) as f:
            return f.read()


def build_powercap(
    root: Path, sockets: int = 2, *, dram: bool = True, psys: bool = False, core: bool = True
) -> FakePowercap:
    """A tree with ``sockets`` packages (each with core and, if ``dram``, dram subzones) and,
    if ``psys``, a psys zone after them."""
    tree = FakePowercap(root)
    for socket in range(sockets):
        tree.add_package(socket, dram=dram, core=core)
    if psys:
        tree.add_psys(sockets)
    return tree

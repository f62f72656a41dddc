"""Slurm's compressed text: host lists, tasks per node, and node addresses. Stdlib only."""

from __future__ import annotations

import re


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list → names: 'n[1-2],gpu[08-10,12],login' (as scontrol
    show hostnames; several bracket groups in one name are expanded left to right)."""
    names: list[str] = []
    for item in _split_top_level(text.strip()):
        if item:
            names.extend(_expand_item(item))
    return names


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in host list {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise ValueError(f"unbalanced '[' in host list {text!r}")
    parts.append("".join(current))
    return parts


def _expand_item(item: str) -> list[str]:
    match = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", item)
    if not match:
        return [item]
    prefix, ranges, rest = match.groups()
    out = []
    for part in ranges.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise ValueError(f"bad range {part!r} in host list item {item!r}")
            width = len(lo) if lo.startswith("0") else 0
            numbers = [str(n).zfill(width) for n in range(int(lo), int(hi) + 1)]
        elif part.isdigit():
            numbers = [part]
        else:
            raise ValueError(f"bad range {part!r} in host list item {item!r}")
        for number in numbers:
            out.extend(_expand_item(prefix + number + rest))
    return out


def expand_tasks_per_node(text: str) -> list[int]:
    """SLURM_TASKS_PER_NODE → one count per node: '2(x3),1' → [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in text.strip().split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            raise ValueError(f"cannot parse tasks per node {text!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def parse_node_addresses(text: str) -> dict[str, str]:
    """`scontrol -o show node` output → {NodeName: NodeAddr}."""
    addresses = {}
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "NodeName" in fields:
            addresses[fields["NodeName"]] = fields.get("NodeAddr") or fields["NodeName"]
    return addresses


def format_addresses(addresses: dict[str, str]) -> str:
    return ",".join(f"{name}={addr}" for name, addr in addresses.items())


def parse_addresses(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(",") if "=" in item)

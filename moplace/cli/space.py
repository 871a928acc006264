"""``moplace search --space torchtitan|megatron``: the search kept to the plans a training
framework runs (`moplace.core.degrees`, searched by `searchers.degrees.SpaceSearcher`), and
``moplace show FRONT --against OTHER``: what one front buys over another (after a ``--space``
search, what the unconstrained front buys: "the fastest plan of OTHER is N% faster than the
fastest torchtitan one").
"""

from __future__ import annotations

from ..errors import MoplaceError

#: the spaces ``--space`` takes: any (every strategy the genome encodes) or a framework's
SPACES = ("any", "torchtitan", "megatron")


def space_option(parser) -> None:
    """Add ``--space`` to ``parser`` (search)."""
    parser.add_argument("--space", choices=SPACES, default="any",
                        help="the plans searched: any (default: per-op placement, splits and "
                             "levers) or only those torchtitan or Megatron-LM express (a genome "
                             "of degrees: devices, pipeline stages, data or tensor parallel, "
                             "micro-batches, schedule, recomputation, ZeRO/FSDP as the "
                             "framework names it), searched with --searcher nsga2 or random; "
                             "every point then exports as that framework's configuration")


def space_searcher(args, settings: dict):
    """The searcher of a ``--space`` search with ``settings`` (``--set``; None for ``--space
    any``); a `MoplaceError` for a searcher the degree genome has no method for, before any
    work."""
    space = getattr(args, "space", "any")
    if space == "any":
        return None
    from searchers.degrees import METHODS, SpaceSearcher

    if args.searcher not in METHODS:
        raise MoplaceError(f"--searcher {args.searcher}: --space {space} searches its genome of "
                           f"degrees with {' or '.join(METHODS)}")
    if getattr(args, "checkpoint", None):
        raise MoplaceError(f"--checkpoint: not with --space {space} (its searches are short)")
    return SpaceSearcher(space=space, method=args.searcher, **settings)


def space_record(args) -> dict:
    """What front.json records of the space (nothing for ``--space any``)."""
    space = getattr(args, "space", "any")
    return {} if space == "any" else {"space": space}


def against(data: dict, other: dict, what: str, other_what: str) -> list[str]:
    """Lines saying what front ``other`` buys over front ``data`` on each objective both
    have: its best feasible value against ``data``'s, in percent of it ("the best
    unconstrained plan (...) is 2.7% faster than the best torchtitan one")."""
    from objectives import json_key

    from ..review.units import fmt, kind_of, label

    def best(d, o):
        vals = [p[json_key(o)] for p in d.get("points") or [] if p.get("feasible")]
        return min(vals) if vals else None

    mine, theirs = data.get("graph_fingerprint"), other.get("graph_fingerprint")
    if mine and theirs and mine != theirs:
        raise MoplaceError(f"--against {other_what}: searched on another graph than {what} "
                           f"({other.get('graph')!r}, other ops, sizes or times)")
    name = data.get("space") or what
    other_name = other.get("space") or "unconstrained"
    lines = []
    for o in data["objectives"]:
        if o not in other.get("objectives", []):
            continue
        a, b = best(data, o), best(other, o)
        if a is None or b is None:
            lines.append(f"{label(o)}: no feasible point on {what if a is None else other_what}")
            continue
        less, more = ("faster", "slower") if kind_of(o) == "time" else ("less", "more")
        if a == b:
            how = "the same as"
        elif a == 0:
            how = f"{more} than"
        else:
            how = f"{abs(a - b) / a:.1%} {less if b < a else more} than"
        lines.append(f"{label(o)}: the best {other_name} plan ({other_what}, "
                     f"{fmt(b, kind_of(o))}) is {how} the best {name} one ({fmt(a, kind_of(o))})")
    if not lines:
        raise MoplaceError(f"--against {other_what}: no objective in common with {what}")
    return lines

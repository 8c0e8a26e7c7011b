"""Match policies: how candidate vertices are ordered (see the table in ``fluxinfra.matcher``).

A policy is Fluxion's ``multilevel_id`` scorer: each visited vertex scores ``id + 1`` plus, for a
type with a *score factor* (``node`` when node-centric), ``((id + 1) + 1) * 10000 + tie`` added to
everything below it; ``high`` keeps the best-scoring candidates, ``low`` the worst. ``first`` also
stops exploring once a request level is satisfied, visiting children least-free first.
``locality`` and ``variation`` are Fluxion's interval / performance-class scorers.

>>> p = parse_policy("hinodex")
>>> (p.high, p.node_centric, sorted(p.exclusive_types), p.stop_on_k)
(True, True, ['node'], 0)
>>> parse_policy("policy=low node_exclusive=true").exclusive_types
{'node'}
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fluxinfra.matcher.errors import MatcherError

__all__ = ["Policy", "parse_policy", "NAMED_POLICIES"]

NAMED_POLICIES: dict[str, str] = {
    "first": "policy=high node_centric=true stop_on_1_matches=true",
    "firstnodex": "policy=high node_centric=true node_exclusive=true stop_on_1_matches=true",
    "high": "policy=high",
    "low": "policy=low",
    "lonode": "policy=low node_centric=true",
    "hinode": "policy=high node_centric=true",
    "lonodex": "policy=low node_centric=true node_exclusive=true",
    "hinodex": "policy=high node_centric=true node_exclusive=true",
    # Fluxion's locality scores like high, except at the top level (see Traverser)
    "locality": "policy=locality",
    "variation": "policy=variation",
}
_OPTIONS = ("policy", "node_centric", "stop_on_1_matches", "node_exclusive")


@dataclass
class Policy:
    """A parsed match policy."""

    name: str
    kind: str = "high"  # high | low | locality | variation
    node_centric: bool = False
    exclusive_types: set[str] = field(default_factory=set)
    stop_on_k: int = 0
    #: type -> (add_by, multiply_by) score factors
    factors: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def high(self) -> bool:
        """Keep the highest scores (else the lowest) when choosing among candidates."""
        return self.kind not in ("low", "variation")

    @property
    def slot_high(self) -> bool:
        """Order of candidates packed into slots (variation ranks them highest first)."""
        return self.kind != "low"


def parse_policy(text: str) -> Policy:
    """A named policy (``first``, ``low`` ...) or a custom string (``policy=high node_...``)."""
    spec = NAMED_POLICIES.get(text, text)
    pol = Policy(name=text)
    opts: dict[str, str] = {}
    for item in spec.split():
        key, sep, value = item.partition("=")
        if key not in _OPTIONS or not sep:
            raise MatcherError(f"policy {text!r}: invalid option {item!r}; use one of "
                               f"{', '.join(NAMED_POLICIES)} or policy=high|low with "
                               "node_centric/node_exclusive/stop_on_1_matches=true|false")
        if key == "policy":
            if value not in ("high", "low", "variation", "locality") or (
                    value in ("variation", "locality") and text != value):
                raise MatcherError(f"policy {text!r}: policy= accepts only low or high")
        elif value not in ("true", "false"):
            raise MatcherError(f"policy {text!r}: option {key} requires true or false, "
                               f"got {value!r}")
        opts[key] = value
    if "policy" not in opts:
        raise MatcherError(f"policy {text!r}: a custom policy needs policy=high or policy=low")
    pol.kind = opts["policy"]
    if opts.get("node_centric") == "true":
        pol.node_centric = True
        pol.factors["node"] = (1, 10000)
    if opts.get("node_exclusive") == "true":
        pol.exclusive_types.add("node")
    if opts.get("stop_on_1_matches") == "true":
        pol.stop_on_k = 1
    return pol

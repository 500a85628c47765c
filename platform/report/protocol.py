"""Which protocol produced a study's rows: the paper's frozen base, a base per regularizer, or the joint search."""
from __future__ import annotations

from typing import Any

SENTENCES = {
    ("paper", "shared"): "protocol paper, base.scope shared (the paper's): each (model, dataset)'s model and training "
                         "hyperparameters were searched on none and frozen for every regularizer's row",
    ("paper", "per_regularizer"): "protocol paper, base.scope per_regularizer (ndebench's extension): each "
                                  "regularizer's row uses model and training hyperparameters searched with that "
                                  "regularizer on at its grid's middle point",
    ("joint", "shared"): "protocol joint: each row searched its model, training and regularizer hyperparameters "
                         "together",
}
VARIANTS = "variant rows (labels with [...]) fix the values in their label and take the rest from their base"


def protocol_note(params: dict[str, Any]) -> dict[str, str]:
    """``summary.json``'s ``protocol`` from the study run's params (``protocol``, ``base.scope``; a study recorded
    before ``base.scope`` existed had the shared base): the settings and the sentence ``table.md`` shows."""
    protocol = str(params.get("protocol") or "paper")
    scope = str(params.get("base.scope") or "shared") if protocol == "paper" else "shared"
    sentence = SENTENCES.get((protocol, scope), f"protocol {protocol}, base.scope {scope}")
    return {"protocol": protocol, "base_scope": scope, "rows": f"Rows: {sentence}; {VARIANTS}."}

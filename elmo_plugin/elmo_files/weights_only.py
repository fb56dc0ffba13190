"""torch's refusal of a pickle that is not plain tensors (`torch.load(..., weights_only=True)`)
in our one-line errors without torch's advice to load it with `weights_only=False` or to allow
its globals: those steps would run the code the refusal kept out."""

import re

REFUSAL = re.compile(r"WeightsUnpickler error: (.*?)(?:\.\s|\.?$)", re.DOTALL)


def without_unsafe_advice(error: BaseException) -> str:
    """`str(error)`; for torch's weights-only refusal, its reason and what it means."""
    match = REFUSAL.search(str(error))
    if match is None:
        return str(error)
    return (
        f"its weights are not plain tensors ({' '.join(match.group(1).split())}): a pickle that "
        "could run code when loaded, refused; load only weights you trust"
    )

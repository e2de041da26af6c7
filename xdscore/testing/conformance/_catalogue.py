"""Every case module, imported in the order the cases run."""

# isort: off
from . import _cases_stream, _cases_acks, _cases_sotw, _cases_delta, _cases_order
from . import _cases_features

# isort: on

__all__ = [
    "_cases_acks",
    "_cases_delta",
    "_cases_features",
    "_cases_order",
    "_cases_sotw",
    "_cases_stream",
]

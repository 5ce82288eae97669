"""The op converters, one module per family; importing this package registers them all."""

from . import (  # noqa: F401  (registration)
    attention,
    classical_ml,
    control_flow,
    data_shapes,
    elementwise,
    flex_attention,
    gradient,
    image,
    integer_linear,
    llm,
    nn,
    quant,
    random,
    recurrent,
    reduce,
    resize,
    sequence,
    signal,
    tensor,
    vision,
)

"""The bundle manifest (``manifest.json``): versions, member checksums, the model's interface.

The manifest is the one member that is not checksummed (it holds the checksums); it is parsed
strictly: known keys only, every value typed. A format version whose major number this graphrt
does not know is refused; a newer minor version of the same major is read, ignoring keys this
version does not know (minor versions only add optional keys).

Example:
    >>> manifest = parse_manifest(b'''{"format": "graphrt.bundle", "format_version": "1.0",
    ...   "graphrt_version": "0.1.0", "members": {}, "inputs": [], "params": [],
    ...   "outputs": [], "device_types": [], "external_kernels": [], "metadata": {}}''')
    >>> manifest.format_version
    '1.0'
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from ..errors import BundleError, describe
from ..jsondoc import describe_validation_error, read_json
from ..schema import Entry, parse_dtype
from .members import MANIFEST, check_member_name

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Manifest",
    "MemberDigest",
    "TensorSpec",
    "parse_manifest",
    "shape_of",
]

FORMAT = "graphrt.bundle"
FORMAT_MAJOR, FORMAT_MINOR = 1, 0
FORMAT_VERSION = f"{FORMAT_MAJOR}.{FORMAT_MINOR}"
"""The bundle format version this graphrt writes (and the newest it reads fully)."""

_INT_LIST = re.compile(r"\[\n\s*(-?\d+(?:,\n\s*-?\d+)*)\n\s*\]")
"""A list of integers as ``json.dumps(indent=2)`` spreads it over lines (never in a string,
which holds no raw newline)."""

_VERSION = re.compile(r"([0-9]{1,4})\.([0-9]{1,4})", re.ASCII)
"""``MAJOR.MINOR`` in ASCII digits only (``int()`` and ``str.isdigit`` accept any Unicode digit)."""

Count = Annotated[StrictInt, Field(ge=0, le=2**63 - 1)]
"""A size or dimension: a non-negative int of 64 bits."""

Shape = list[Count | StrictStr]
"""A tensor shape in the manifest: a list of non-negative ints (``[]`` is a scalar)."""


def shape_of(entry: Entry) -> list[int | str]:
    """The manifest form of a graph entry's shape (the one place shapes are converted).

    Example:
        >>> from graphrt import load_graph
        >>> shape_of(load_graph("examples/graphs/simplex.json").entries[0])  # doctest: +SKIP
        [4]
    """
    return list(entry.shape_text)


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TensorSpec(_Strict):
    """A named tensor of the model's interface: an input, a param or an output."""

    name: StrictStr
    shape: Shape
    dtype: StrictStr

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, dtype: str) -> str:
        parse_dtype(dtype)  # raises ValueError listing the supported dtypes
        return dtype


class MemberDigest(_Strict):
    """A member's size in bytes and the SHA-256 of its content (lowercase hex)."""

    size: Count
    sha256: Annotated[StrictStr, Field(pattern=r"^[0-9a-f]{64}$")]


class Manifest(_Strict):
    """``manifest.json``: what a bundle holds and what its model takes and gives.

    Attributes:
        format: always ``"graphrt.bundle"``.
        format_version: ``"MAJOR.MINOR"`` of the bundle format.
        graphrt_version: the graphrt that wrote the bundle.
        members: every other member's size and SHA-256, by member name.
        inputs: the graph inputs the caller sets (graph inputs that are not params).
        params: the graph inputs stored in ``params.safetensors``.
        outputs: the graph outputs, in output order.
        device_types: the DLPack device type codes the graph places entries on (1 cpu,
            2 cuda, 12 ext_dev/sim); empty when the graph does not say.
        external_kernels: func_names no bundle member defines; the program that loads the
            bundle supplies them (``bundle.create(..., lib=...)``).
        metadata: free-form JSON (model name, source, ...).
    """

    format: Literal["graphrt.bundle"]
    format_version: Annotated[StrictStr, Field(pattern=r"^[0-9]{1,4}\.[0-9]{1,4}$")]
    graphrt_version: StrictStr
    members: dict[StrictStr, MemberDigest]
    inputs: list[TensorSpec]
    params: list[TensorSpec]
    outputs: list[TensorSpec]
    device_types: list[Annotated[StrictInt, Field(ge=1, le=2**31 - 1)]]
    external_kernels: list[StrictStr]
    metadata: dict[StrictStr, JsonValue]

    def to_json(self) -> bytes:
        """The manifest as indented JSON (what ``manifest.json`` holds), shapes on one line."""
        text = json.dumps(self.model_dump(mode="json"), indent=2, ensure_ascii=False,
                          allow_nan=False)
        text = _INT_LIST.sub(lambda m: f"[{', '.join(n.strip() for n in m[1].split(','))}]",
                             text)
        return text.encode("utf-8") + b"\n"


def _version(data: dict[str, Any]) -> tuple[int, int]:
    """Check the format and version keys first, so an old graphrt says why it cannot read."""
    if data.get("format") != FORMAT:
        raise BundleError(f"{MANIFEST}: 'format' is {describe(data.get('format'), 60)}, "
                          f"expected {FORMAT!r}; this is not a graphrt bundle")
    version = data.get("format_version")
    match = _VERSION.fullmatch(version) if isinstance(version, str) else None
    if match is None:
        raise BundleError(f"{MANIFEST}: 'format_version' is {describe(version, 30)}, expected "
                          "'MAJOR.MINOR' (ASCII digits, at most 4 each)")
    major, minor = int(match[1]), int(match[2])
    if major != FORMAT_MAJOR:
        raise BundleError(f"{MANIFEST}: bundle format version {version} is not supported; this "
                          f"graphrt reads format {FORMAT_MAJOR}.x (it writes {FORMAT_VERSION})")
    return major, minor


def parse_manifest(raw: bytes) -> Manifest:
    """Parse and check ``manifest.json``.

    Raises:
        BundleError: not JSON, not a graphrt bundle, an unsupported format version, a missing,
            unknown or mistyped key, or a member name that is not a plain name.
    """
    data = read_json(raw, MANIFEST, BundleError)
    if not isinstance(data, dict):
        raise BundleError(f"{MANIFEST} must hold a JSON object, given {type(data).__name__}")
    _, minor = _version(data)
    if minor > FORMAT_MINOR:  # a newer minor version only adds optional keys
        data = {key: value for key, value in data.items() if key in Manifest.model_fields}
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as err:
        raise BundleError(f"malformed {MANIFEST}: "
                          + describe_validation_error(err, "manifest")) from None
    for name in manifest.members:
        check_member_name(name, f"{MANIFEST} lists member")
    return manifest

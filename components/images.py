"""Container image references: parsing, and whether a reference is pinned."""

from __future__ import annotations

import re
from dataclasses import dataclass

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# A tag is pinned when it names one build: a full x.y.z version or a llama.cpp build number
# (`server-vulkan-b11434`). `latest`, `server-vulkan` or `3.12-slim` move under the user's feet.
_PINNED_TAG = re.compile(r"(^|[-_.])(v?\d+\.\d+\.\d+|b\d{3,})([-_.+]|$)")
_NAME = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class ImageRef:
    """An image reference split into repository, tag and digest."""

    repository: str
    tag: str | None
    digest: str | None

    @property
    def pinned(self) -> bool:
        """True when the reference names exactly one build (a digest or a build/version tag)."""
        if self.digest is not None:
            return True
        return self.tag is not None and bool(_PINNED_TAG.search(self.tag))


def parse_image(reference: str) -> ImageRef:
    """Parse `repo[:tag][@sha256:...]`; raise ValueError with what is wrong."""
    if not reference or reference != reference.strip():
        raise ValueError("an image reference must be a non-empty string without spaces")
    rest, _, digest = reference.partition("@")
    if digest and not _DIGEST.match(digest):
        raise ValueError(f"digest {digest!r} is not sha256:<64 hex digits>")
    repository, tag = rest, None
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        repository, tag = rest.rsplit(":", 1)
        if not _TAG.match(tag):
            raise ValueError(f"tag {tag!r} is not a valid image tag")
    if not _NAME.match(repository):
        raise ValueError(f"repository {repository!r} is not a valid image name (lowercase)")
    return ImageRef(repository=repository, tag=tag, digest=digest or None)

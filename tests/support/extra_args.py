"""The kubelet's expansion of $(VAR) references in a container's args, as tests model it."""

from __future__ import annotations


def kubelet_expanded(word: str, env: dict[str, str]) -> str:
    """A container arg as the kubelet runs it, by the API's documented rule: `$(NAME)` is the
    variable's value when the container's environment has it, else left as it is; `$$` is
    one `$`, which keeps a following `(NAME)` from being expanded."""
    out, index = [], 0
    while index < len(word):
        char = word[index]
        if char == "$" and index + 1 < len(word):
            following = word[index + 1]
            if following == "$":
                out.append("$")
                index += 2
                continue
            if following == "(":
                close = word.find(")", index + 2)
                if close != -1:
                    name = word[index + 2 : close]
                    out.append(env.get(name, f"$({name})"))
                    index = close + 1
                    continue
        out.append(char)
        index += 1
    return "".join(out)

"""Whether this user may read a hub repository, and a one-line error that says what to do when not.

Some repositories (Llama-2, Llama-3, Mistral-7B, Mixtral) are *gated*: each user accepts a licence on the
repository's hub page, then reads it with a token. Without that, transformers raises an ``OSError`` whose first
line ("You are trying to access a gated repo.") drops the link and the remedy; :func:`hub_error_line` keeps them.

>>> access_problem("meta-llama/Llama-2-7b-hf", offline=True, gated=True)
'meta-llama/Llama-2-7b-hf is gated: accept its licence at https://huggingface.co/meta-llama/Llama-2-7b-hf, then ...'
"""

from __future__ import annotations

HUB = "https://huggingface.co"
LOGIN = "log in with `hf auth login` (or set HF_TOKEN to a read token)"


def gated_hint(name: str) -> str:
    """What a user does before a gated repository can be read."""
    return f"{name} is gated: accept its licence at {HUB}/{name}, then {LOGIN}, and run again"


def _chain(err: BaseException):
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def hub_error_line(name: str, err: BaseException) -> str:
    """One line for a failed hub read of ``name``: gated (with the licence link and the login), missing, or
    the error's first line with a check of the id and the network."""
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    errors = list(_chain(err))
    text = " ".join(str(e) for e in errors).lower()
    if any(isinstance(e, GatedRepoError) for e in errors) or "gated repo" in text:
        return gated_hint(name)
    if any(isinstance(e, RepositoryNotFoundError) for e in errors) or "is not a valid model identifier" in text:
        return (f"{name} was not found on the hub (or is private): check the id at {HUB}/{name}; a private "
                f"repository also needs a token ({LOGIN})")
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return f"could not load hub id {name!r} ({first}); check the id and network access"


def access_problem(name: str, offline: bool, gated: bool = False) -> str:
    """Why this user cannot read ``name`` ("" when they can). Offline, only the table's ``gated`` mark is known
    (the licence may already be accepted: the message says it was not checked); online, the hub is asked
    (``huggingface_hub.auth_check``: the token, the licence, the id)."""
    if offline:
        return gated_hint(name) + " (not checked offline; ignore if already done)" if gated else ""
    from huggingface_hub import auth_check

    try:
        auth_check(name)
    except Exception as err:  # noqa: BLE001 -- every failure becomes the one line that says what to do
        if unreachable(err):  # no answer from the hub: what the table knows, said as such
            return gated_hint(name) + " (the hub did not answer: not checked; ignore if already done)" if gated else ""
        return hub_error_line(name, err)
    return ""


def unreachable(err: BaseException) -> bool:
    """Whether ``err`` says the hub could not be reached (no network, DNS, timeout, offline mode) rather than
    answering that the repository is gated, missing or private."""
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    errors = list(_chain(err))
    if any(isinstance(e, GatedRepoError | RepositoryNotFoundError) for e in errors):
        return False
    if any(isinstance(e, HfHubHTTPError) and getattr(e, "response", None) is not None for e in errors):
        return False  # the hub answered (401, 403, 5xx ...)
    return True

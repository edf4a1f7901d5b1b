"""`mcp-gateway token create | revoke | list`: static client tokens in a token file (only their SHA-256 stored)."""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path
from typing import Any

from gateway.cli.common import Commands, with_config
from gateway.cli.parsing import subcommands


def _config_name(args: argparse.Namespace) -> str | None:
    """The config file named by --config or $MCP_GATEWAY_CONFIG, if any."""
    from gateway.config import ENV_CONFIG_FILE

    return getattr(args, "config", None) or os.environ.get(ENV_CONFIG_FILE) or None


def _config_auth(args: argparse.Namespace) -> dict[str, Any]:
    """The [auth] table of the config file named by --config or $MCP_GATEWAY_CONFIG ({} without one).

    Read as plain TOML, not validated: the secrets the configuration names (environment variables of
    the service) need not exist in the shell of whoever manages tokens."""
    from gateway.config import read_toml

    name = _config_name(args)
    if not name:
        return {}
    auth = read_toml(Path(name)).get("auth", {})
    return auth if isinstance(auth, dict) else {}


def _configured_token_file(args: argparse.Namespace) -> str | None:
    """The first auth.token_files entry of the config file named by --config or $MCP_GATEWAY_CONFIG."""
    files = _config_auth(args).get("token_files")
    return files[0] if isinstance(files, list) and files and isinstance(files[0], str) else None


def _token_file(args: argparse.Namespace) -> tuple[Path, str | None]:
    """The file a token command edits or reads (--file, else the configured one, else the default),
    and the configured one."""
    from gateway.policy.token_files import default_token_file

    configured = _configured_token_file(args)
    return Path(args.file or configured or default_token_file()), configured


def _is_configured(path: Path, configured: str | None) -> bool:
    return configured is not None and Path(configured).resolve() == path.resolve()


def _check_mode(path: Path, command: str) -> None:
    """The gateway's own rule for a token file (docs/security-auth.md): TokenFileError for one that is
    not a regular file or that others can write; a warning on stderr for one others can read."""
    from gateway.config.auth import token_file_readable_warning
    from gateway.policy.token_files import check_token_file_mode

    mode = path.stat().st_mode
    check_token_file_mode(path, mode)
    warning = token_file_readable_warning(path, mode)
    if warning is not None:
        written = " (this command writes it mode 0600)" if command != "list" else ""
        print(f"mcp-gateway token {command}: warning: {warning}{written}", file=sys.stderr)


def _configured_sha256(entry: dict[str, Any]) -> str | None:
    """The hex SHA-256 of an [[auth.tokens]] entry's token where this shell can know it (its sha256, a
    secret file it can read, a variable it has); None otherwise: only its name is checked then."""
    from gateway.config.auth import secret_from_text

    digest, file, env = entry.get("sha256"), entry.get("file"), entry.get("env")
    if isinstance(digest, str):
        return digest.strip().lower()
    try:
        if isinstance(file, str):
            text = Path(file).read_text(encoding="utf-8")
        elif isinstance(env, str):
            text = os.environ.get(env, "")
        else:
            return None
        secret = secret_from_text(text, "the token")
    except (OSError, ValueError):
        return None
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _check_whole(args: argparse.Namespace, path: Path, entries: list[Any]) -> None:
    """With a configuration, check `entries` as the content of the token file `path` together with
    everything else the gateway loads ([[auth.tokens]] and every token file, `path` counted even when
    the configuration does not list it yet): TokenFileError (a TokenClash for a name or token used
    twice) when the gateway could not use them. Without a configuration, nothing beyond the file."""
    from gateway.policy.token_files import check_unique

    sources = _sources(args, path, entries)
    if sources is not None:
        check_unique(sources)


def _sources(args: argparse.Namespace, path: Path, entries: list[Any]) -> list[Any] | None:
    """Every token the gateway of the configuration loads, `entries` standing for the file `path` (as
    TokenSource); None without a configuration. TokenFileError when one of its token files cannot be read."""
    from gateway.policy.token_files import TokenSource, read_token_file

    config = _config_name(args)
    if config is None:
        return None
    auth = _config_auth(args)
    configured = auth.get("tokens")
    sources = [
        TokenSource(item["name"], f"[[auth.tokens]] of {config}", _configured_sha256(item))
        for item in (configured if isinstance(configured, list) else [])
        if isinstance(item, dict) and isinstance(item.get("name"), str)
    ]
    files = auth.get("token_files")
    written = _written_where(args, path)
    listed = False
    for name in files if isinstance(files, list) else []:
        if not isinstance(name, str):
            continue
        where = str(Path(name))
        listed = listed or where == written
        current = entries if where == written else read_token_file(Path(name))
        sources += [TokenSource(entry.name, where, entry.sha256) for entry in current]
    if not listed:
        sources += [TokenSource(entry.name, written, entry.sha256) for entry in entries]
    return sources


def _written_where(args: argparse.Namespace, path: Path) -> str:
    """`path` as the configuration's token_files spells it (as the gateway names it), else as given."""
    files = _config_auth(args).get("token_files")
    for name in files if isinstance(files, list) else []:
        try:
            if isinstance(name, str) and Path(name).resolve() == path.resolve():
                return str(Path(name))
        except (OSError, ValueError):  # a NUL in a name: the gateway refuses that configuration itself
            continue
    return str(path)


def _undoing(args: argparse.Namespace, name: str, place: str) -> str:
    """How to remove the token `name` configured at `place` (a token file, or [[auth.tokens]])."""
    if place.startswith("[[auth.tokens]]"):
        return f"remove the [[auth.tokens]] entry {name!r} from {_config_name(args)} and run `mcp-gateway reload`"
    return f"`mcp-gateway token revoke {name} --file {place}`"


def _mending(args: argparse.Namespace, exc: Exception) -> str:
    """How to mend what stops the gateway from using the tokens: a name clash undone at either of its
    places, one token under two names withdrawn at both (or the copy removed), another token file mended."""
    from gateway.policy.token_files import TokenClash

    if not isinstance(exc, TokenClash):
        return "mend that file first (`mcp-gateway token list --file FILE` reads it as the gateway does)"
    ways = [_undoing(args, name, place) for name, place in zip(exc.names, exc.places, strict=True)]
    if exc.names[0] == exc.names[1]:
        return "undo it at either place: " + ", or ".join(dict.fromkeys(ways))
    # One secret under two names: removing either name lets the other load, and the secret with it.
    first, second = exc.names
    return (
        f"remove both names to withdraw the secret (it may have leaked): {ways[0]}, and {ways[1]}; removing one "
        f"name alone leaves the secret accepted under the other. To keep it for one caller, remove only the copy "
        f"({first!r} or {second!r}, whichever was not meant to hold it), and the secret stays valid for the other"
    )


def _involves(exc: Exception, where: str) -> bool:
    from gateway.policy.token_files import TokenClash

    return isinstance(exc, TokenClash) and where in exc.places


def cmd_token_create(args: argparse.Namespace) -> int:
    """Create a random token for NAME, store only its SHA-256 in the token file, print it once."""
    from gateway.policy.token_files import TokenClash, TokenFileError, create_token

    path, configured = _token_file(args)
    try:
        if path.exists():
            _check_mode(path, "create")  # its warning; create_token refuses what the gateway refuses
        token = create_token(
            path, args.name, args.scope, replace=args.replace, check=lambda entries: _check_whole(args, path, entries)
        )
    except TokenClash as exc:
        where = _written_where(args, path)
        if _involves(exc, where) and args.name in exc.names:
            advice = "choose another name: a token name is unique across [[auth.tokens]] and every token file"
            if args.replace:
                advice += f" (--replace replaces a token of {where} only)"
        else:
            advice = _mending(args, exc)
        print(
            f"mcp-gateway token create: {exc}; nothing written: the gateway would not use {where} (a running one "
            f"keeps its previous tokens, and one starting refuses to start). To go on, {advice}.",
            file=sys.stderr,
        )
        return 2
    except (TokenFileError, OSError) as exc:
        print(f"mcp-gateway token create: {exc}", file=sys.stderr)
        return 2
    failure = _print_token(token)
    if failure is not None:
        return _withdrawn(args, path, token, failure)
    scopes = " ".join(args.scope) or "none"
    notes = [
        f'Created token "{args.name}" (scopes: {scopes}) in {path}.',
        "The token is printed once, on standard output: only its SHA-256 is stored, so it cannot be shown again.",
        "Clients send it as the header:  Authorization: Bearer <token>",
    ]
    if not _is_configured(path, configured):
        notes.append(
            f'The gateway uses this file once the configuration lists it:  [auth] token_files = ["{path.resolve()}"]'
        )
    print("\n".join(notes), file=sys.stderr)
    return 0


def _print_token(token: str) -> str | None:
    """Print the token alone on stdout (TOKEN=$(mcp-gateway token create ...) works); why it reached
    nobody, or None: stdout closed when the command started (`main` gave it /dev/null), or the write failed."""
    if sys.__stdout__ is None:
        return "standard output is closed"
    try:
        sys.stdout.write(token + "\n")
        sys.stdout.flush()
    except OSError as exc:
        # The unwritten token stays buffered: /dev/null gives the interpreter's last flush somewhere to go.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exc.strerror or type(exc).__name__
    return None


def _withdrawn(args: argparse.Namespace, path: Path, token: str, reason: str) -> int:
    """Remove the entry of a token nobody received (its printing failed): exit 1, saying what became of it."""
    from gateway.policy.token_files import TokenFileError, token_sha256, withdraw_token

    told = f"mcp-gateway token create: the token could not be printed ({reason}), so nobody received it"
    try:
        removed = withdraw_token(path, args.name, token_sha256(token))
    except (TokenFileError, OSError) as exc:
        print(
            f"{told}, and its entry could not be removed again: {exc}. It stays valid until you run "
            f"`mcp-gateway token revoke {args.name} --file {path}`.",
            file=sys.stderr,
        )
        return 1
    done = (
        f"its entry {args.name!r} is removed from {path} again"
        if removed
        else "another command has changed or removed its entry since"
    )
    replaced = " (the token it replaced stays withdrawn)" if args.replace and removed else ""
    print(
        f"{told}: {done}{replaced}. Run the command again with standard output open.",
        file=sys.stderr,
    )
    return 1


def _entries_of(path: Path, command: str) -> list[Any] | None:
    """The entries of the token file, checked as the gateway checks it; None (the error printed) when it
    cannot be used."""
    from gateway.policy.token_files import TokenFileError, read_token_file

    try:
        _check_mode(path, command)
        return read_token_file(path)
    except FileNotFoundError:
        print(
            f"mcp-gateway token {command}: token file {path}: not found (name the file with --file PATH or --config)",
            file=sys.stderr,
        )
    except (TokenFileError, OSError, ValueError) as exc:
        print(f"mcp-gateway token {command}: {exc}", file=sys.stderr)
    return None


def _only_this_file(path: Path) -> str:
    """The note of a revocation without a configuration: which places it could not search."""
    return (
        f"Only {path} was searched for the same token under another name: without a configuration "
        "(--config or $MCP_GATEWAY_CONFIG) this command cannot see the other token files or [[auth.tokens]]: "
        "the same token under another name there stays accepted. With --config it checks them all."
    )


def _remove_entry(args: argparse.Namespace, path: Path, target: Path) -> int | tuple[list[Any], list[Any]]:
    """Under the file's lock: the entries before and after NAME's removal, written to `target`; or the
    exit status, the reason printed, when there is nothing to remove."""
    from gateway.policy.token_files import render_token_file, write_atomically

    entries = _entries_of(path, "revoke")
    if entries is None:
        return 2
    kept = [entry for entry in entries if entry.name != args.name]
    if len(kept) == len(entries):
        known = ", ".join(entry.name for entry in entries) or "none"
        message = f"mcp-gateway token revoke: no token named {args.name!r} in {path} (its tokens: {known})"
        in_config = _config_auth(args).get("tokens")
        if isinstance(in_config, list) and any(isinstance(t, dict) and t.get("name") == args.name for t in in_config):
            # [[auth.tokens]] of the configuration itself: only a reload applies its removal (docs/reload.md).
            message += (
                f"; {args.name!r} is an [[auth.tokens]] entry of the configuration: delete it there, then run "
                "`mcp-gateway reload`"
            )
        print(message, file=sys.stderr)
        return 1
    # A revocation is written whatever else is wrong: it is the safe direction, and once the rest is mended
    # it applies by itself. What keeps it from applying now is said, and the exit status is 1.
    write_atomically(target, render_token_file(kept))
    return entries, kept


def cmd_token_revoke(args: argparse.Namespace) -> int:
    """Remove NAME's entry from the token file (written atomically, mode 0600, as create writes it)."""
    from gateway.policy.token_files import TokenFileError, TokenSource, check_unique, locked_token_file

    path, configured = _token_file(args)
    try:
        with locked_token_file(path) as target:
            removed = _remove_entry(args, path, target)
    except TokenFileError as exc:  # the lock was not free in time
        print(f"mcp-gateway token revoke: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError:  # no directory to hold the lock: no file either
        _entries_of(path, "revoke")
        return 2
    except OSError as exc:
        print(f"mcp-gateway token revoke: token file {path}: {exc}", file=sys.stderr)
        return 2
    if isinstance(removed, int):
        return removed
    entries, kept = removed
    revoked = next(entry for entry in entries if entry.name == args.name)
    clash: TokenFileError | None = None
    sources: list[Any] | None = None
    survivors: list[Any] = []
    try:
        sources = _sources(args, path, kept)
        # Without a configuration only this file is seen: the same secret may sit in it under another name.
        seen = sources if sources is not None else [TokenSource(e.name, str(path), e.sha256) for e in kept]
        survivors = [source for source in seen if source.sha256 == revoked.sha256]
        if sources is not None:
            check_unique(sources)
    except TokenFileError as exc:
        clash = exc
    if survivors:
        # A revocation withdraws a name; the secret it stood for stays valid under each other name.
        names = ", ".join(f"{source.name!r} ({source.where})" for source in survivors)
        ways = ", and ".join(_undoing(args, source.name, source.where) for source in survivors)
        print(
            f"mcp-gateway token revoke: revoked {args.name!r} in {path}, but the same token (the same secret) "
            f"is still accepted as {names}. To withdraw it, remove {'that' if len(survivors) == 1 else 'each'} "
            f"too: {ways}.",
            file=sys.stderr,
        )
        if sources is None:
            # Other copies may sit where this command cannot look: said here as on success.
            print(_only_this_file(path), file=sys.stderr)
    if clash is not None:
        where = _written_where(args, path)
        if _involves(clash, where):
            outcome = (
                f"a running gateway cannot use {where} now and keeps its previous tokens, so {args.name!r} is "
                "still accepted until that is mended"
            )
        else:
            outcome = "a gateway started with this configuration refuses to start"
        print(
            f"mcp-gateway token revoke: revoked {args.name!r} in {path}, but {clash}: {outcome}. Mend it: "
            f"{_mending(args, clash)}; the revocation then applies within a second.",
            file=sys.stderr,
        )
    if survivors or clash is not None:
        return 1
    print(f'Revoked token "{args.name}" in {path}.')
    # Token files are re-read when they change (gateway/policy/static_tokens.py): no reload is needed.
    who = (
        "A running gateway"
        if _is_configured(path, configured)
        else f"A gateway whose [auth] token_files lists {path.resolve()}"
    )
    print(
        f"{who} re-reads the file within a second and refuses the token from its next request; "
        "no reload or restart is needed."
    )
    if sources is None:
        print(_only_this_file(path))
    else:
        unknown = [source.name for source in sources if source.sha256 is None]
        if unknown:
            print(
                f"The [[auth.tokens]] token(s) {', '.join(map(repr, unknown))} cannot be read from this shell (an "
                "environment variable of the service, or a file it cannot read), so they were not compared with "
                "the revoked one."
            )
    return 0


def cmd_token_list(args: argparse.Namespace) -> int:
    """The tokens of the token file: names, scopes and creation times (never a hash: they stay in the file)."""
    path, _ = _token_file(args)
    entries = _entries_of(path, "list")
    if entries is None:
        return 2
    if not entries:
        print(f"no tokens in {path}", file=sys.stderr)
        return 0
    from gateway.cli.columns import aligned

    rows = [(entry.name, " ".join(entry.scopes) or "-", entry.created or "-") for entry in entries]
    print(aligned(("NAME", "SCOPES", "CREATED"), rows))
    return _whole_listed(args, path, entries)


def _whole_listed(args: argparse.Namespace, path: Path, entries: list[Any]) -> int:
    """With a configuration: 1 and the reason on stderr when the gateway cannot use the file's tokens
    together with the rest of it (as broker_diagnose's auth.token_file_unusable says of a running one)."""
    from gateway.policy.token_files import TokenFileError

    try:
        _check_whole(args, path, entries)
    except TokenFileError as exc:
        print(
            f"mcp-gateway token list: {exc}: the gateway cannot use these tokens (a running one keeps the file's "
            f"previous tokens, and one starting refuses to start). To mend it, {_mending(args, exc)}.",
            file=sys.stderr,
        )
        return 1
    return 0


def _file_flag(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--file",
        metavar="PATH",
        help="token file (default: the first [auth] token_files entry of --config / $MCP_GATEWAY_CONFIG, else "
        "/etc/mcp-gateway/tokens.toml when /etc/mcp-gateway exists, else ./tokens.toml)",
    )


def add_token(commands: Commands) -> None:
    token = commands.add_parser("token", help="manage static client tokens ([auth] token_files)")
    token_commands = subcommands(token, "token_command")
    token_create = token_commands.add_parser(
        "create",
        help="create a client token and print it once",
        description="Create a random 256-bit client token for NAME with the given scopes. Only its SHA-256 is "
        "written to the token file (created mode 0600, replaced atomically); the token is printed once on "
        "standard output and cannot be shown again.",
    )
    token_create.add_argument("name", help="the caller the token stands for, e.g. scada")
    token_create.add_argument(
        "--scope",
        action="append",
        default=[],
        metavar="SCOPE",
        help="a scope to grant (repeat for several), e.g. pump-1 or metrics; see [auth] required_scopes",
    )
    _file_flag(token_create)
    token_create.add_argument(
        "--replace", action="store_true", help="replace an existing token of that name (the old one stops working)"
    )
    with_config(token_create)
    token_create.set_defaults(func=cmd_token_create)
    token_revoke = token_commands.add_parser(
        "revoke",
        help="revoke a client token (remove it from the token file)",
        description="Remove NAME's token from the token file (replaced atomically, mode 0600). A running gateway "
        "re-reads the file when it changes: the token is refused from its next request, without a reload. Exit "
        "1 when the file has no token of that name, and when the token is still accepted after its removal: "
        "the same token under another name (in any token file or [[auth.tokens]] the command sees), or a "
        "clash that keeps the gateway from using the file (the revocation is written all the same).",
    )
    token_revoke.add_argument("name", help="the token's name, as `mcp-gateway token list` shows it")
    _file_flag(token_revoke)
    with_config(token_revoke)
    token_revoke.set_defaults(func=cmd_token_revoke)
    token_list = token_commands.add_parser(
        "list",
        help="list the client tokens of the token file (names, scopes, creation times)",
        description="List the tokens of the token file: name, scopes and creation time. Hashes are not shown; "
        "the tokens themselves are stored nowhere.",
    )
    _file_flag(token_list)
    with_config(token_list)
    token_list.set_defaults(func=cmd_token_list)

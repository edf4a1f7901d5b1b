"""`mcp-gateway tls self-signed`: a local CA and a server certificate for a site without a PKI."""

from __future__ import annotations

import argparse
import errno
import sys

from gateway.cli.common import Commands, directory_name, whole_number
from gateway.cli.parsing import subcommands
from gateway.config import DEFAULT_PORT


def cmd_tls_self_signed(args: argparse.Namespace) -> int:
    """Create a local CA and a server certificate signed by it, then print where each file goes."""
    from pathlib import Path

    from gateway.policy.tls_self_signed import (
        SERVER_CERT,
        SelfSignedError,
        create,
        default_names,
        existing_names,
        instructions,
    )

    notes: list[str] = []
    try:
        if args.host or args.ip:
            hosts, ips = args.host or [], args.ip or []
        elif args.force and (kept := existing_names(Path(args.dir))) is not None:
            # A renewal (--force) keeps what boards and clients dial, not this machine's defaults.
            hosts, ips = kept
            notes.append(
                f"keeping the names of the existing {SERVER_CERT}: {', '.join([*hosts, *ips])} "
                "(give --host/--ip to change them)"
            )
        else:
            hosts, ips = default_names(args.port)
            refusal = _hostname_refusal(hosts)
            if refusal is not None:
                print(f"mcp-gateway tls self-signed: {refusal}", file=sys.stderr)
                return 2
        issued = create(Path(args.dir), hosts, ips, days=args.days, force=args.force, new_ca=args.new_ca)
    except SelfSignedError as exc:
        print(f"mcp-gateway tls self-signed: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        # A --dir that cannot be made or written is a usage error (2) like any path named on the command
        # line; a write that fails on a full or failing disk is the operation failing (1).
        text = exc.strerror or str(exc)
        where = exc.filename if exc.filename is not None else args.dir
        print(f"mcp-gateway tls self-signed: cannot write {where}: {text[:1].lower()}{text[1:]}", file=sys.stderr)
        return 1 if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO) else 2
    for host in issued.hosts_as_ip:
        notes.append(f"--host {host} is an IP address: the certificate holds it as one (as --ip would)")
    for note in notes:
        print(f"mcp-gateway tls self-signed: {note}", file=sys.stderr)
    if issued.cut_short:
        print(
            f"mcp-gateway tls self-signed: warning: {SERVER_CERT} is valid only until {issued.not_after:%Y-%m-%d}, "
            f"not {args.days} days: the CA ends then; pass --new-ca --force for a new CA "
            "(boards then need the new ca.pem)",
            file=sys.stderr,
        )
    print(instructions(issued, args.port))
    return 0


def _hostname_refusal(hosts: list[str]) -> str | None:
    """Why this machine's own names (the default, no --host given) cannot go into the certificate, or None."""
    from gateway.discovery.names import host_label
    from gateway.policy.tls_self_signed import SelfSignedError, check_dns_name

    try:
        for name in hosts:
            check_dns_name(name)
    except SelfSignedError:
        answered = host_label().removesuffix(".")
        return (
            f"this machine's hostname {hosts[0]!r} is not a DNS name (letters, digits, '-', dots), so it cannot be "
            f"in a certificate; pass the names boards dial with --host (the gateway answers mDNS as {answered}: "
            f"--host {answered}), and addresses with --ip"
        )
    return None


def add_tls(commands: Commands) -> None:
    tls = commands.add_parser("tls", help="TLS certificates for the gateway")
    tls_commands = subcommands(tls, "tls_command")
    self_signed = tls_commands.add_parser(
        "self-signed",
        help="create a local CA and a server certificate for a site without a PKI",
        description=cmd_tls_self_signed.__doc__,
    )
    self_signed.add_argument(
        "--dir", default="tls", type=directory_name, help="where to write the files (default ./tls)"
    )
    self_signed.add_argument(
        "--host",
        action="append",
        metavar="NAME",
        help="a DNS name the certificate is valid for; an IP address given here goes in as --ip (repeat; "
        "default: the names of the server.pem in DIR when renewing it, else this machine's hostname, "
        "<hostname>.local, localhost, the mDNS SRV target <hostname>-<port>.local, and 127.0.0.1, ::1)",
    )
    self_signed.add_argument("--ip", action="append", metavar="ADDR", help="an IP address it is valid for (repeat)")
    self_signed.add_argument(
        "--days", type=int, default=825, metavar="N", help="validity of the server certificate (default 825)"
    )
    self_signed.add_argument(
        "--port",
        type=whole_number(1, 65535),
        default=DEFAULT_PORT,
        help=f"the gateway's port, shown in the printed URLs and named in the default SRV target name, 1 to 65535 "
        f"(default {DEFAULT_PORT})",
    )
    self_signed.add_argument("--force", action="store_true", help="overwrite existing files")
    self_signed.add_argument(
        "--new-ca", action="store_true", help="make a new CA even if DIR has one (boards then need the new ca.pem)"
    )
    self_signed.set_defaults(func=cmd_tls_self_signed)

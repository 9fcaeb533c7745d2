"""``python -m harness.realnode.registry --listen 127.0.0.1:0 --port-file F --image NAME=ARCHIVE ...``.

Binds a loopback address (port 0: a free one), writes the port to ``--port-file`` once it accepts connections and
serves until SIGTERM. A NAME may end in ``:*`` for any tag. Images can be added later by whoever knows
``$FAKEDEV_REGISTRY_TOKEN`` (see ``server``); without it, the set is fixed.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import sys
from pathlib import Path
from types import FrameType

from harness.errors import RegistryError
from harness.realnode.registry.names import ImageRule, parse_image_name
from harness.realnode.registry.server import ADMIN_TOKEN_ENV, Images, build_catalog, log, make_server


def _rule(text: str) -> ImageRule:
    name, equals, archive = text.partition("=")
    if not equals or not archive:
        raise argparse.ArgumentTypeError(f"--image {text!r}: expected NAME=ARCHIVE")
    try:
        return ImageRule(name=parse_image_name(name, any_tag=True), archive=Path(archive).resolve())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _listen(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
        number = int(port)
    except ValueError:
        loopback, number = False, -1
    if not colon or not loopback or not 0 <= number < 65536:
        raise argparse.ArgumentTypeError(f"--listen {text!r}: expected a loopback IP:PORT (nothing leaves the machine)")
    return host, number


def _stop(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.realnode.registry", description=__doc__)
    parser.add_argument(
        "--listen", type=_listen, default=("127.0.0.1", 0), help="loopback IP:PORT (default 127.0.0.1:0)"
    )
    parser.add_argument("--port-file", type=Path, required=True, help="where to write the bound port")
    parser.add_argument("--image", type=_rule, action="append", default=[], help="NAME=ARCHIVE (NAME may end in :*)")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
    try:
        images = Images(build_catalog(args.image))
    except RegistryError as exc:
        log.error("registry: %s", exc)
        return 2
    host, port = args.listen
    server = make_server(host=host, port=port, images=images, admin_token=os.environ.get(ADMIN_TOKEN_ENV) or None)
    signal.signal(signal.SIGTERM, _stop)
    partial = args.port_file.with_name(f".{args.port_file.name}.{os.getpid()}")
    partial.write_text(f"{server.server_address[1]}\n")
    partial.replace(args.port_file)
    for rule in images.catalog.rules:
        log.info("serving %s from %s", rule.name, rule.archive)
    log.info("listening on %s:%d", host, server.server_address[1])
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

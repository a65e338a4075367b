"""``verispec models install NAME | list``: the real model pairs verispec installs."""

from __future__ import annotations

from verispec.cli.options import Parser
from verispec.errors import VerispecError


def add_parser(subparsers) -> None:
    models = subparsers.add_parser("models", help="install and list real model pairs")
    actions = models.add_subparsers(dest="action", required=True, parser_class=Parser)
    install = actions.add_parser("install", help="download, join, check and convert a pair (resumable)")
    install.add_argument("name", help="pair name (see 'verispec models list')")
    install.add_argument("--cache", metavar="DIR", help="cache directory (default $VERISPEC_CACHE or "
                         "~/.cache/verispec)")
    install.add_argument("--keep-gguf", action="store_true", help="keep the joined GGUF files")
    listing = actions.add_parser("list", help="known pairs and whether they are installed")
    listing.add_argument("--cache", metavar="DIR", help="cache directory")


def run(args) -> int:
    from verispec.models.install import PAIRS, install_pair, installed_pair

    if args.action == "install":
        result = install_pair(args.name, cache=args.cache, progress=True, keep_gguf=args.keep_gguf)
        print(f"installed {args.name}: target {result['target_dir']}, draft {result['draft_dir']}")
        return 0
    for name, pair in sorted(PAIRS.items()):
        try:
            target_dir, _ = installed_pair(name, args.cache)
            state = f"installed in {target_dir.parent}"
        except VerispecError:
            state = f"not installed (verispec models install {name})"
        print(f"{name}: {pair.description}; {state}")
    return 0

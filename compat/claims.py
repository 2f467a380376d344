"""The claims gate: every manifest claim checked against mlxcel's real surfaces, in both directions.

Surfaces: the hidden `--dump-flag-surface` of `mlxcel-server` and `mlxcel serve`, the FastAPI app's
registered routes, and the native /completion request schema. An entry with no claim must be accepted
by neither binary (so adding a b10621 flag, route or field without flipping its entry fails).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .schema import MANIFEST_DIR, load_json, shard_files

BINARIES = {
    "mlxcel-server": ["-c", "from server.cli.main import server_main; server_main()"],
    "mlxcel serve": [
        "-c",
        "import sys; sys.argv[0] = 'mlxcel'; from server.cli.main import mlxcel_main; mlxcel_main()",
        "serve",
    ],
}


@dataclass
class Surfaces:
    flags: dict[str, list[dict]]  # binary -> options from --dump-flag-surface
    routes: set[str]  # "METHOD /path" in b10621's spelling (":param")
    fields: set[str]
    help_text: dict[str, str] = field(default_factory=dict)


def dump_flags(binary: str) -> tuple[list[dict], str]:
    base = [sys.executable, *BINARIES[binary]]
    dump = subprocess.run([*base, "--dump-flag-surface"], capture_output=True, text=True, check=True).stdout
    helptext = subprocess.run([*base, "--help"], capture_output=True, text=True, check=True).stdout
    return json.loads(dump)["options"], helptext


def app_routes() -> set[str]:
    import re

    from server.api.app import create_app, registered_routes
    from server.router.app import empty_router_app

    param = re.compile(r"[{](\w+)[}]")  # FastAPI's {id_slot} is b10621's :id_slot
    served = registered_routes(create_app(None)) | registered_routes(empty_router_app())  # one model, router
    return {m + " " + param.sub(r":\1", path) for m, path in served}


def real_surfaces() -> Surfaces:
    from server.api.schemas import native_completion_fields

    flags, helps = {}, {}
    for b in BINARIES:
        flags[b], helps[b] = dump_flags(b)
    return Surfaces(flags=flags, routes=app_routes(), fields=set(native_completion_fields()), help_text=helps)


def load_entries(manifest_dir: Path = MANIFEST_DIR) -> list[dict]:
    return [e for p in shard_files(manifest_dir) for e in load_json(p).get("entries", [])]


def check_claims(entries: list[dict], s: Surfaces) -> list[str]:  # noqa: C901
    errors: list[str] = []
    accepted = {b: {sp: o for o in opts for sp in o["spellings"]} for b, opts in s.flags.items()}
    b10621_spellings = set()
    for e in entries:
        claim = e.get("mlxcel") or {}
        eid = e["id"]
        if e["kind"] == "option":
            b10621_spellings.update(e["spellings"])
            claimed = set(claim.get("accepted_spellings") or [])
            if claimed - set(e["spellings"]) and e["state"] != "aliased":
                errors.append(f"{eid}: claims spellings {sorted(claimed - set(e['spellings']))} that are not b10621's")
            only = claim.get("accepted_on_one_binary_only")
            for b, acc in accepted.items():
                want = set() if only and only != b else claimed & set(e["spellings"])
                got = {sp for sp in e["spellings"] if sp in acc}
                if got != want:
                    if got - want:
                        errors.append(
                            f"{eid}: {b} accepts {sorted(got - want)} but the manifest does not claim it "
                            f"(flip the entry's claim and state)"
                        )
                    if want - got:
                        errors.append(f"{eid}: claims {sorted(want - got)} but {b} does not accept it")
                bound = {acc[sp].get("env") for sp in got} - {None}
                if claim.get("env") and claim.get("env_binding") == "parser" and bound != {claim["env"]}:
                    errors.append(f"{eid}: claims env {claim['env']} bound by the parser; {b} binds {sorted(bound)}")
                if not claim.get("env") and e.get("env") in bound:
                    errors.append(f"{eid}: {b} binds {e['env']} but the manifest does not claim it")
                for sp, default in (claim.get("defaults") or {}).items():
                    if sp in acc and acc[sp].get("default") != default:
                        errors.append(f"{eid}: claims default {default!r} for {sp}; {b} has {acc[sp].get('default')!r}")
                hidden = set(claim.get("hidden") or [])
                for sp in got:
                    if acc[sp].get("hidden") != (sp in hidden):
                        errors.append(f"{eid}: {sp} hidden={acc[sp].get('hidden')} on {b}; claim says {sp in hidden}")
        elif e["kind"] == "route":
            errors.extend(_check_identity(e, claim.get("route"), s.routes, "route"))
        elif e["kind"] == "native_request_field":
            name = e["id"].removeprefix("field:")
            errors.extend(_check_identity({**e, "id": name}, claim.get("field"), s.fields, "field"))
    for b, helptext in s.help_text.items():
        if "--dump-flag-surface" in helptext:
            errors.append(f"{b}: --dump-flag-surface must never appear in --help")
    return errors


def _check_identity(e: dict, claimed: str | None, registered: set[str], what: str) -> list[str]:
    eid, state = e["id"], e["state"]
    if claimed is None:
        return [f"{eid}: mlxcel serves this {what} but the manifest does not claim it"] if eid in registered else []
    if state == "aliased":
        out = []
        if claimed == eid:
            out.append(f"{eid}: an aliased claim must name a different mlxcel {what}")
        if claimed not in registered:
            out.append(f"{eid}: aliased to {claimed}, which mlxcel does not serve")
        if eid in registered:
            out.append(f"{eid}: aliased, yet mlxcel serves the b10621 {what} itself (then it is supported)")
        return out
    if claimed != eid:
        return [f"{eid}: claims {what} {claimed}; only an aliased entry may name another identity"]
    return [] if eid in registered else [f"{eid}: claims the {what} but mlxcel does not serve it"]


def main() -> int:
    errors = check_claims(load_entries(), real_surfaces())
    for err in errors:
        print(err, file=sys.stderr)
    print(f"claims: {'ok' if not errors else f'{len(errors)} violation(s)'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

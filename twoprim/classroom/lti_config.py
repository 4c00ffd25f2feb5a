"""The LMS side of the classroom (LTI 1.3): the configuration `./course hub --lti CONFIG` and `./course lti-grades`
read, LMS roles and contexts mapped to the course's, account names derived from the LMS, and the record of launches.

CONFIG is a JSON or TOML file (TOML shown; Canvas's values in docs/guides/lti.md):

    issuer = "https://canvas.instructure.com"           # the platform's `iss`
    client_id = "10000000000123"                        # the developer key's id (the id_token's `aud`)
    deployment_ids = ["123:8865aa05b4b79b64a91a86042e43af5ea8ae79eb"]
    auth_login_url = "https://sso.canvaslms.com/api/lti/authorize_redirect"   # OIDC authorization endpoint
    auth_token_url = "https://sso.canvaslms.com/login/oauth2/token"          # client-credentials grant (AGS)
    jwks_url = "https://sso.canvaslms.com/api/lti/security/jwks"             # the platform's signing keys
    private_key = "/srv/lti/tool-key.pem"              # the tool's RSA key (its public half: /hub/lti13/jwks)
    username_claim = "email"                           # optional: the claim an account's name comes from
    [contexts]                                         # LMS course (context id) -> course id on this hub
    "4dde05e8ca1973bcca9bffc13e1548820eee93a3" = "two-primitives"
    [links]                                            # optional: resource link id -> assignment
    "6ae5ee5d-6e55-4ec0-9e5f-7ba4b51fd3d4" = "ex01_dot"

Roles: a context role Instructor (or any of its sub-roles, TeachingAssistant among them) logs in as the course's
instructor account (the one `./course hub` made and runs the course's exchange and formgrader as); Learner as a
student, whose account is made at their first launch (`account_name`: from the LMS, checked, never someone else's).
Institution roles (`.../institution/person#Instructor`) grant nothing in a course.

The record of launches: grader/lti-users.json in the course's folder (the instructor's, 0600): for each LMS
identity ("ISS SUB") the account it logs in as, its role and the LMS's names, and the AGS endpoint each launch
carried (where grades go back, `lti_grades.py`).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twoprim.core.errors import CourseError

NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")  # as hub_checks.NAME: a Unix account name
RECORD = "lti-users.json"  # in a course's grader/
CANVAS_ISSUER = "https://canvas.instructure.com"
ROLES = "http://purl.imsglobal.org/vocab/lis/v2/membership"
CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
AGS_CLAIM = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
REQUIRED = (
    "issuer",
    "client_id",
    "deployment_ids",
    "auth_login_url",
    "auth_token_url",
    "jwks_url",
    "private_key",
    "contexts",
)


class LTIConfigError(CourseError):
    """A configuration that cannot work: says which key and what to put there."""


@dataclass(frozen=True)
class LTIConfig:
    """One LMS registration of the tool and the courses its contexts map to."""

    path: Path
    issuer: str
    client_id: str
    deployment_ids: tuple[str, ...]
    auth_login_url: str
    auth_token_url: str
    jwks_url: str
    private_key: Path
    contexts: dict[str, str]  # LMS context id -> course id
    links: dict[str, str] = field(default_factory=dict)  # resource link id -> assignment
    auth_audience: str = ""
    username_claim: str = ""

    def private_key_pem(self) -> str:
        try:
            return self.private_key.read_text()
        except OSError as err:
            raise LTIConfigError(
                f"cannot read the tool's private key {self.private_key} ({err.strerror}), named by "
                f"private_key in {self.path}: make one with `openssl genrsa -out "
                f"{self.private_key} 2048`"
            ) from None

    def public_jwk(self) -> dict:
        """The tool's public key as a JWK (what the LMS is given, or fetches from /hub/lti13/jwks)."""
        from jwcrypto.jwk import JWK

        key = JWK.from_pem(self.private_key_pem().encode())
        jwk = json.loads(key.export_public())
        return {**jwk, "kid": jwk.get("kid") or key.thumbprint(), "alg": "RS256", "use": "sig"}

    def course_of(self, context_id: str | None) -> str | None:
        return self.contexts.get(context_id or "")


def _url(config: Path, key: str, value) -> str:
    if not isinstance(value, str) or not re.match(r"^https?://[^\s/]+", value):
        raise LTIConfigError(
            f"{key} in {config} is {value!r}, not a URL: give the platform's {key.replace('_', ' ')}"
            f" (docs/guides/lti.md lists Canvas's and Moodle's)"
        )
    return value


def load(path: Path, courses: set[str] | None = None) -> LTIConfig:
    """Read and check CONFIG (JSON, or TOML when it ends in .toml); `courses`: the course ids this hub serves, which
    every context must map to."""
    path = Path(path)
    try:
        text = path.read_text()
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except OSError as err:
        raise LTIConfigError(
            f"cannot read the LTI configuration {path} ({err.strerror}): pass an existing JSON or TOML file with --lti"
        ) from None
    except (ValueError, tomllib.TOMLDecodeError) as err:
        raise LTIConfigError(
            f"the LTI configuration {path} is not valid {'TOML' if path.suffix == '.toml' else 'JSON'}"
            f" ({err}): correct it (docs/guides/lti.md has an example)"
        ) from None
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise LTIConfigError(
            f"the LTI configuration {path} lacks {', '.join(missing)}: each comes from the LMS's "
            f"registration of the tool (docs/guides/lti.md says where)"
        )
    ids = data["deployment_ids"]
    if isinstance(ids, str):
        ids = [ids]
    if not ids or not all(isinstance(i, str) and i for i in ids):
        raise LTIConfigError(f"deployment_ids in {path} must list the deployment ids the LMS gave (strings)")
    contexts = data["contexts"]
    if not isinstance(contexts, dict) or not contexts:
        raise LTIConfigError(
            f"contexts in {path} must map each LMS course's context id to a course id, e.g. "
            f'{{"4dde05e8ca19": "two-primitives"}}'
        )
    unknown = sorted({c for c in contexts.values() if courses is not None and c not in courses})
    if unknown:
        raise LTIConfigError(
            f"contexts in {path} name {', '.join(unknown)}, which this hub does not serve (it serves "
            f"{', '.join(sorted(courses or ()))}): correct the course ids"
        )
    key = Path(data["private_key"])
    if not key.is_absolute():
        key = (path.parent / key).resolve()
    config = LTIConfig(
        path=path,
        issuer=str(data["issuer"]),
        client_id=str(data["client_id"]),
        deployment_ids=tuple(ids),
        auth_login_url=_url(path, "auth_login_url", data["auth_login_url"]),
        auth_token_url=_url(path, "auth_token_url", data["auth_token_url"]),
        jwks_url=_url(path, "jwks_url", data["jwks_url"]),
        private_key=key,
        contexts={str(k): str(v) for k, v in contexts.items()},
        links={str(k): str(v) for k, v in (data.get("links") or {}).items()},
        auth_audience=str(data.get("auth_audience") or ""),
        username_claim=str(data.get("username_claim") or ""),
    )
    config.public_jwk()  # the key reads and is an RSA key, or the error says what to do
    return config


# --- roles and names ---------------------------------------------------------------------------------------------


def course_role(roles: list[str]) -> str | None:
    """ "instructor" (Instructor and its sub-roles, TeachingAssistant among them), "student" (Learner) or None, from
    the launch's roles claim; institution and system roles count for nothing in a course."""
    found = set()
    for role in roles or ():
        if role in ("Instructor", "TeachingAssistant") or role.startswith(
            (f"{ROLES}#Instructor", f"{ROLES}/Instructor#")
        ):
            found.add("instructor")
        elif role == "Learner" or role.startswith((f"{ROLES}#Learner", f"{ROLES}/Learner#")):
            found.add("student")
    return "instructor" if "instructor" in found else ("student" if found else None)


def identity(claims: dict) -> str:
    """The LMS user as one string: "ISSUER SUB" (the pair the LTI specification makes unique)."""
    return f"{claims.get('iss', '')} {claims.get('sub', '')}"


def _candidate(claims: dict, username_claim: str) -> str:
    value = ""
    for key in ([username_claim] if username_claim else []) + ["preferred_username", "email", "given_name"]:
        value = (claims.get(CLAIM + "custom") or {}).get(key[7:]) if key.startswith("custom_") else claims.get(key)
        if isinstance(value, str) and value.strip():
            break
        value = ""
    value = value.split("@")[0].lower()
    value = re.sub(r"[^a-z0-9_-]+", "-", value).strip("-_")
    value = re.sub(r"^[^a-z]+", "", value)[:24].rstrip("-_")
    return value or "lti"


def account_name(claims: dict, taken, username_claim: str = "") -> str:
    """A new Unix account name for the LMS user of `claims`: from `username_claim` (else preferred_username, email's
    local part, given name), made a valid name; `taken(name)` True when the name already belongs to someone (an
    account or another LMS identity): then the name gets a suffix from the LMS identity, stable across launches."""
    name = _candidate(claims, username_claim)
    if taken(name):
        name = f"{name[:23]}-{hashlib.sha256(identity(claims).encode()).hexdigest()[:8]}"
        if taken(name):
            raise LTIConfigError(
                f"the account name {name} derived for {identity(claims)} is taken: remove the stale account or record"
            )
    assert NAME.match(name), name
    return name


# --- the record of launches ------------------------------------------------------------------------------------


def record_path(course: Path) -> Path:
    """The course's record of LTI launches: grader/lti-users.json."""
    return Path(course) / "grader" / RECORD


def read_record(course: Path) -> dict:
    """{"users": {identity: {...}}, "ags": {...}} from the course's grader/lti-users.json (empty when none)."""
    try:
        data = json.loads(record_path(course).read_text())
    except (OSError, ValueError):
        return {"users": {}, "ags": {}}
    return {"users": dict(data.get("users") or {}), "ags": dict(data.get("ags") or {})}


def accounts(course: Path) -> dict[str, dict]:
    """Account name -> its launch record (students; the instructor's account may appear once per LMS instructor)."""
    return {entry["account"]: {**entry, "identity": who} for who, entry in read_record(course)["users"].items()}


def record_launch(course: Path, claims: dict, account: str, role: str, owner: tuple[int, int] | None = None) -> None:
    """Add or refresh the launch of `claims` (logged in as `account`) and the AGS endpoint it carried."""
    record = read_record(course)
    who = identity(claims)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    entry: dict[str, Any] = record["users"].get(who) or {"first": now}
    entry.update(
        account=account,
        role=role,
        sub=claims.get("sub"),
        iss=claims.get("iss"),
        last=now,
        name=claims.get("name") or "",
        email=claims.get("email") or "",
        context=(claims.get(CLAIM + "context") or {}).get("id"),
    )
    record["users"][who] = entry
    ags = claims.get(AGS_CLAIM) or {}
    if ags.get("lineitems"):
        record["ags"].update(lineitems=ags["lineitems"], scope=list(ags.get("scope") or []))
    if ags.get("lineitem"):
        link = (claims.get(CLAIM + "resource_link") or {}).get("id", "")
        record["ags"].setdefault("lineitem", {})[link] = ags["lineitem"]
    path = record_path(course)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    if owner is not None:
        os.chown(tmp, *owner)
    os.replace(tmp, path)


def assignment_of(claims: dict, config: LTIConfig) -> str | None:
    """The assignment a launch names: the custom parameter `assignment`, else the resource link's entry in [links]."""
    custom = claims.get(CLAIM + "custom") or {}
    if isinstance(custom.get("assignment"), str) and custom["assignment"].strip():
        return custom["assignment"].strip()
    link = (claims.get(CLAIM + "resource_link") or {}).get("id")
    return config.links.get(link or "")

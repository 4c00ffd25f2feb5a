"""An LMS that is not ours, on loopback: lti1p3platform (PyPI) does the platform's side of LTI 1.3 (OIDC login
initiation, the signed id_token, JWKS, the client-credentials token, AGS line items and scores); this module only
hosts its classes' endpoints in a small tornado app, in a thread, with bounded start and stop.

    GET  /launch?user=&roles=&context=&link=&assignment=&variant=   the LMS's link: starts the OIDC login at the tool
    GET  /authorize                                                  the platform's OIDC authorization endpoint
    GET  /jwks                                                       its keys
    POST /token                                                      client-credentials grant (AGS)
    GET|POST /ags/<context>/lineitems, GET /ags/<context>/lineitems/<id>, POST .../<id>/scores, GET .../<id>/results

`variant` makes a bad launch, still built and signed by the library: "bad-signature" (signed with a key the JWKS
does not hold, under the JWKS key's id), "expired" (exp in the past), "wrong-audience" (aud another client's).
"""

from __future__ import annotations

import asyncio
import html
import json
import secrets
import threading
import time
import typing as t
import urllib.parse

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from lti1p3platform.exceptions import LineItemNotFoundException
from lti1p3platform.lineitem import TLineItem
from lti1p3platform.ltiplatform import JWKS, LTI1P3PlatformConfAbstract
from lti1p3platform.message_launch import LTIAdvantageMessageLaunchAbstract
from lti1p3platform.oidc_login import OIDCLoginAbstract
from lti1p3platform.registration import Registration
from lti1p3platform.request import Request, TRequest
from lti1p3platform.score import UpdateScoreStatus
from lti1p3platform.service_connector import AssignmentsGradesService, TPage
from tornado import httpserver, web

CLIENT_ID = "tool-client-1"
DEPLOYMENT_ID = "deployment-1"
LEARNER = "http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"
INSTRUCTOR = "http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor"
TA = "http://purl.imsglobal.org/vocab/lis/v2/membership/Instructor#TeachingAssistant"
START_S = 10


def private_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def public_pem(private: str) -> str:
    key = serialization.load_pem_private_key(private.encode(), None)
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


class TornadoRequest(Request):
    """lti1p3platform's request, from a tornado request."""

    def build_metadata(self, request) -> TRequest:
        first = lambda args: {k: v[0].decode() for k, v in args.items()}  # noqa: E731
        body = request.body or b""
        is_json = "json" in (request.headers.get("Content-Type") or "")
        return {
            "method": request.method,
            "form_data": first(request.body_arguments),
            "get_data": first(request.query_arguments),
            "headers": request.headers,
            "content_type": request.headers.get("Content-Type"),
            "path": request.path,
            "json": json.loads(body) if is_json and body else None,
        }


class PlatformConf(LTI1P3PlatformConfAbstract):
    def init_platform_config(self, **kwargs: t.Any) -> None:
        self._registration: Registration = kwargs["registration"]

    def get_registration_by_params(self, **kwargs):
        return self._registration


class Login(OIDCLoginAbstract):
    def set_lti_message_hint(self, **kwargs):
        self._lti_message_hint = kwargs["hint"]

    def get_redirect(self, url: str):
        return url


class Launch(LTIAdvantageMessageLaunchAbstract):
    """The library's launch; a variant only changes what the library is asked to sign, or with which key."""

    variant = ""
    wrong_key = ""

    def get_launch_message(self, include_extra_claims: bool = True):
        message = super().get_launch_message(include_extra_claims)
        if self.variant == "wrong-audience":
            message.update(aud="another-tool", azp="another-tool")
        return message

    def generate_launch_request(self):
        if self.variant == "expired":
            self.set_id_token_expiration(-120)
        launch = super().generate_launch_request()
        if self.variant == "bad-signature":
            message, _ = self.get_launch_data()
            assert self._registration is not None  # (the launch is the platform's, registered)
            launch["id_token"] = Registration.encode_and_sign(
                message, self.wrong_key, headers={"kid": self._registration.get_kid()}, expiration=300
            )
        return launch

    def render_launch_form(self, launch_data, **kwargs):
        fields = "".join(
            f'<input type="hidden" name="{k}" value="{html.escape(v)}"/>'
            for k, v in launch_data.items()
            if k != "launch_url"
        )
        return (
            f'<form method="POST" action="{html.escape(launch_data["launch_url"])}" id="form">{fields}</form>'
            f'<script>document.getElementById("form").submit();</script>'
        )


class Grades(AssignmentsGradesService):
    """AGS with the platform's line items and scores in memory (what the test reads back)."""

    def __init__(self, request, platform, lineitems_url, store):
        super().__init__(request, platform, lineitems_url)
        self.store = store

    def find_lineitems(
        self, page=1, limit=None, line_item_id=None, resource_link_id=None, resource_id=None, tag=None, **_
    ) -> TPage:
        items = [
            i
            for i in self.store["lineitems"].values()
            if (not tag or i.get("tag") == tag) and (not resource_id or i.get("resourceId") == resource_id)
        ]
        return {"content": items, "has_next": False, "next": None}

    def find_lineitem(self, line_item_id):
        for item in self.store["lineitems"].values():
            if item["id"].rstrip("/").endswith("/" + line_item_id):
                return item
        raise LineItemNotFoundException()

    def create_lineitem(self, creation_data) -> TLineItem:
        number = str(len(self.store["lineitems"]) + 1)
        item: TLineItem = {**creation_data, "id": f"{self.ags.lineitems_url}/{number}"}
        self.store["lineitems"][number] = item
        return item

    def update_lineitem(self, update_data):
        item_id = update_data.get("id")
        assert item_id is not None, update_data
        item = self.find_lineitem(item_id.rsplit("/", 1)[-1])
        item.update(update_data)
        return item

    def delete_lineitem(self, line_item_id):
        self.store["lineitems"].pop(line_item_id, None)

    def update_score(self, line_item_id, score):
        self.find_lineitem(line_item_id)
        user = score.get("userId")
        assert user is not None, score
        fail = self.store["fail"].get(user, 0)
        if fail:
            self.store["fail"][user] = fail - 1
            raise web.HTTPError(503)
        self.store["scores"].setdefault(line_item_id, {})[user] = score
        return UpdateScoreStatus.SUCCESS

    def get_results(self, line_item_id, page=1, limit=None, user_id=None, **_) -> TPage:
        scores = self.store["scores"].get(line_item_id, {})
        return {
            "content": [
                {"userId": u, "resultScore": s.get("scoreGiven"), "resultMaximum": s.get("scoreMaximum")}
                for u, s in scores.items()
            ],
            "has_next": False,
        }


class Platform:
    """The LMS: `start()` serves it on 127.0.0.1 (a free port), `stop()` ends it; both bounded."""

    def __init__(self, tool_login_url: str, tool_launch_url: str, tool_jwks: JWKS):
        self.key, self.wrong_key = private_pem(), private_pem()
        self.tool_login_url, self.tool_launch_url, self.tool_jwks = tool_login_url, tool_launch_url, tool_jwks
        self.store: dict[str, t.Any] = {"lineitems": {}, "scores": {}, "fail": {}}
        self.hints: dict[str, dict] = {}
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: httpserver.HTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def registration(self) -> Registration:
        reg = (
            Registration()
            .set_iss(self.url)
            .set_client_id(CLIENT_ID)
            .set_deployment_id(DEPLOYMENT_ID)
            .set_oidc_login_url(self.tool_login_url)
            .set_launch_url(self.tool_launch_url)
            .set_platform_private_key(self.key)
            .set_platform_public_key(public_pem(self.key))
        )
        reg.set_tool_key_set(self.tool_jwks)
        return reg

    def config(self) -> PlatformConf:
        return PlatformConf(registration=self.registration())

    def tool_settings(self, **extra) -> dict:
        """What the tool's LTI configuration says of this platform."""
        return {
            "issuer": self.url,
            "client_id": CLIENT_ID,
            "deployment_ids": [DEPLOYMENT_ID],
            "auth_login_url": f"{self.url}/authorize",
            "auth_token_url": f"{self.url}/token",
            "jwks_url": f"{self.url}/jwks",
            **extra,
        }

    def launch_url(self, **params) -> str:
        return f"{self.url}/launch?{urllib.parse.urlencode(params)}"

    def start(self) -> Platform:
        ready = threading.Event()

        def serve():
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._server = server = httpserver.HTTPServer(self._app())
            sockets = __import__("tornado.netutil", fromlist=["bind_sockets"]).bind_sockets(0, "127.0.0.1")
            self.port = sockets[0].getsockname()[1]
            server.add_sockets(sockets)
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, daemon=True, name="lti-platform")
        self._thread.start()
        assert ready.wait(START_S), f"the LTI platform did not start within {START_S} s"
        return self

    def stop(self) -> None:
        if self._loop is None:
            return

        def close():
            assert self._server is not None and self._loop is not None  # (started)
            self._server.stop()
            self._loop.stop()

        self._loop.call_soon_threadsafe(close)
        self._thread.join(START_S)
        assert not self._thread.is_alive(), f"the LTI platform did not stop within {START_S} s"

    def _app(self) -> web.Application:
        p = self

        class Base(web.RequestHandler):
            def check_xsrf_cookie(self):
                return

            def reply(self, response):
                self.set_status(response.code)
                if response.result is not None:
                    result = response.result
                    if isinstance(result, dict) and "content" in result and "has_next" in result:
                        result = result["content"]  # a page: the list itself, as AGS serves it
                    self.set_header("Content-Type", response.media_type)
                    self.finish(json.dumps(result))
                else:
                    self.finish(json.dumps({"status": response.message}))

        class LaunchLink(Base):
            def get(self):
                spec = {
                    k: self.get_argument(k, "")
                    for k in ("user", "roles", "context", "link", "assignment", "variant", "email", "name")
                }
                hint = secrets.token_hex(8)
                p.hints[hint] = spec
                login = Login(None, p.config())
                login.set_lti_message_hint(hint=hint)
                self.redirect(login.initiate_login(spec["user"]))

        class Authorize(Base):
            def get(self):
                request = TornadoRequest(self.request)
                spec = p.hints[request.get_data["lti_message_hint"]]
                launch = Launch(request, p.config())
                launch.variant, launch.wrong_key = spec["variant"], p.wrong_key
                launch.set_user_data(
                    spec["user"],
                    spec["roles"].split(","),
                    full_name=spec["name"] or None,
                    email_address=spec["email"] or None,
                )
                launch.set_launch_context_claim(
                    spec["context"],
                    ["http://purl.imsglobal.org/vocab/lis/v2/course#CourseOffering"],
                    f"Course {spec['context']}",
                    spec["context"],
                )
                launch.set_resource_link_claim(spec["link"] or "link-1", title=spec["assignment"] or "a link")
                if spec["assignment"]:
                    launch.set_custom_parameters_claim({"assignment": spec["assignment"]})
                launch.set_ags(f"{p.url}/ags/{spec['context']}/lineitems", allow_creating_lineitems=True)
                self.finish(launch.lti_launch())

        class Jwks(Base):
            def get(self):
                config = p.config()
                config.get_registration()
                self.finish(json.dumps(config.get_jwks()))

        class Token(Base):
            def post(self):
                request = TornadoRequest(self.request)
                config = p.config()
                config.get_registration()
                try:
                    self.finish(json.dumps(config.get_access_token(request.form_data)))
                except Exception as err:  # noqa: BLE001 - the client is told, as a platform would
                    self.set_status(400)
                    self.finish(json.dumps({"error": "invalid_client", "error_description": str(err)}))

        class LineItems(Base):
            def service(self, context):
                config = p.config()
                config.get_registration()
                return Grades(TornadoRequest(self.request), config, f"{p.url}/ags/{context}/lineitems", p.store)

            def get(self, context, item=None, what=None):
                ags = self.service(context)
                if what == "results":
                    self.reply(ags.handle_resp(ags.handle_get_results, line_item_id=item))
                elif item:
                    self.reply(ags.handle_resp(ags.handle_get_lineitem, line_item_id=item))
                else:
                    self.reply(ags.handle_resp(ags.handle_get_lineitems))

            def post(self, context, item=None, what=None):
                ags = self.service(context)
                if what == "scores":
                    self.reply(ags.handle_resp(ags.handle_update_score, line_item_id=item))
                else:
                    self.reply(ags.handle_resp(ags.handle_create_lineitem))

        return web.Application(
            [
                (r"/launch", LaunchLink),
                (r"/authorize", Authorize),
                (r"/jwks", Jwks),
                (r"/token", Token),
                (r"/ags/([^/]+)/lineitems", LineItems),
                (r"/ags/([^/]+)/lineitems/([^/]+)", LineItems),
                (r"/ags/([^/]+)/lineitems/([^/]+)/(scores|results)", LineItems),
            ]
        )

    def scores(self, tag: str) -> dict[str, dict]:
        """userId -> the score the platform holds for the line item tagged `tag` (read from its own store)."""
        for number, item in self.store["lineitems"].items():
            if item.get("tag") == tag:
                return dict(self.store["scores"].get(number, {}))
        return {}


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"no {what} within {timeout:g} s"
        time.sleep(0.2)

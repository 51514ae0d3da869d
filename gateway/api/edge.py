"""FastAPI routers (the admin and feedback routes, where pydantic validation at the edge pays
for itself) as plain ASGI apps under the route skeleton.

No FastAPI application, so no second error handler: the router's own errors (a body that
fails validation, no such path or method) are mapped to gateway errors here, at the
boundary, and rendered by the skeleton like every other route's.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.asyncexitstack import AsyncExitStackMiddleware
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Match

from gateway.api.asgi import Receive, Scope, Send
from gateway.errors import GatewayError, InvalidRequest, MethodNotAllowed, NotFound


class RouterApp:
    """Serves `router`; raises gateway errors instead of answering with FastAPI's."""

    def __init__(self, router: APIRouter) -> None:
        # FastAPI's routes close request files on this stack, which its app would provide.
        self._routes = router.routes
        self._router = AsyncExitStackMiddleware(router)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # With an app in the scope, Starlette raises HTTPException for an unknown path or
        # method instead of answering in plain text itself (as inside a Starlette app).
        scope["app"] = self
        try:
            await self._router(scope, receive, send)
        except RequestValidationError as error:
            raise invalid_request(error) from None
        except HTTPException as error:
            raise http_error(error, scope, self._allowed(scope)) from None

    def _allowed(self, scope: Scope) -> str:
        """Every method some route answers on this path (Starlette names only one route's)."""
        methods = {method for route in self._routes if isinstance(route, BaseRoute)
                   and route.matches(scope)[0] != Match.NONE
                   for method in getattr(route, "methods", None) or ()}
        return ", ".join(sorted(methods - {"HEAD"}))


def invalid_request(error: RequestValidationError) -> InvalidRequest:
    """The first validation error, naming the field (`section`, `bullets.0.id`, ...)."""
    first = error.errors()[0] if error.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or None
    return InvalidRequest(f"{where}: {first.get('msg', 'invalid')}", param=where)


def http_error(error: HTTPException, scope: Scope, allow: str) -> GatewayError:
    route = f"{scope['method']} {scope['path']}"
    if error.status_code == 404:
        return NotFound(f"No route for {route}.")
    if error.status_code == 405:
        return MethodNotAllowed(f"{route}: method not allowed.", allow=allow)
    return InvalidRequest(f"{route}: {error.detail}")

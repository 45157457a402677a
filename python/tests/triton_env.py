"""What the tritonclient tests share: the address of the running xserve
that cmd/xserve's Go tests start (XSERVE_URL, XSERVE_GRPC_URL, host:port),
and the `proto` fixture, each test once over tritonclient.http and once
over tritonclient.grpc. A test file imports both."""

import os

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient


def served_url(var):
    url = os.environ.get(var)
    if not url:
        pytest.fail(f"set {var} to the address of a running xserve (host:port)")
    return url.removeprefix("http://")


@pytest.fixture(scope="module", params=["http", "grpc"])
def proto(request):
    """(kind, client module, client) for "http" and "grpc"."""
    if request.param == "http":
        with httpclient.InferenceServerClient(url=served_url("XSERVE_URL")) as c:
            yield request.param, httpclient, c
    else:
        with grpcclient.InferenceServerClient(url=served_url("XSERVE_GRPC_URL")) as c:
            yield request.param, grpcclient, c

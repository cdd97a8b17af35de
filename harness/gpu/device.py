"""The GPU a setting is applied to, one handle per kind: ``NvmlDevice`` (a real GPU through nvidia-ml-py) and
``TwinSettingDevice`` (a setting endpoint of the twin GPU device over HTTP). The power cap and the SM clock lock are
their subclasses (``harness.gpu.power_cap``, ``harness.gpu.sm_clocks``); each NVML refusal becomes the setting's
own error with NVML's text and the fix."""

from __future__ import annotations

import os
from typing import Any, Callable

import httpx

from harness.core.errors import ServiceUnavailableError, UsageError
from harness.core.http import http_client
from harness.gpu.pass_setting import DeviceSettingError

AS_ROOT = (
    "give the setting to the GPU settings agent, the one process that needs root (harness gpu-settings serve as root; "
    "in a container also with CAP_SYS_ADMIN: the shipped stack's opt-in is HARNESS_SETTINGS_KEY=... docker compose "
    "--profile settings run --rm sweep-settings ..., whose gpu-settings service has both; docs/powercap.md) and pass "
    "--gpu-settings-url; or run the harness itself as root"
)
"""How to get NVML's setters through: root, and CAP_SYS_ADMIN inside a container (NVML_ERROR_NO_PERMISSION otherwise)."""


class NvmlDevice:
    """One GPU through nvidia-ml-py (``pynvml`` initialised, the handle of ``gpu``): the base of the NVML
    setting devices (the power limit here, the SM clock lock in ``harness.gpu.sm_clocks``)."""

    error: type[DeviceSettingError] = DeviceSettingError
    purpose = "the power cap"

    def __init__(self, gpu: int | str = 0) -> None:
        """``gpu``: the GPU's UUID (``GPU-...``, what the sweep passes: the engine's GPU) or an NVML index."""
        from harness.gpu.identity import open_handle

        try:
            import pynvml
        except ImportError:
            raise self.error("nvidia-ml-py is not installed", fix="pip install nvidia-ml-py") from None
        self.nv = pynvml
        try:
            pynvml.nvmlInit()
            self.handle = open_handle(pynvml, gpu)
        except pynvml.NVMLError as exc:
            raise self.error(
                f"NVML is unavailable for {self.purpose}: {exc}", fix="check the NVIDIA driver (nvidia-smi)"
            ) from None

    def set_call(
        self,
        call: Callable[..., Any],
        *args: int,
        doing: str,
        refused: str,
        without_root: str,
        refused_fix: str,
        unsupported_fix: str | None = None,
    ) -> None:
        """Run an NVML setter on this GPU; No Permission, Not Supported (with ``unsupported_fix``) and any other NVML
        error become ``self.error`` naming the NVML error text and the fix. No Permission's fix is ``AS_ROOT``, then
        ``without_root``: what the setting's user can do instead."""
        nv = self.nv
        try:
            call(self.handle, *args)
        except nv.NVMLError_NoPermission as exc:
            err = self.error(f"{doing} needs root (NVML: {exc})", fix=f"{AS_ROOT}; or {without_root}")
            err.no_permission = True
            raise err from None
        except nv.NVMLError_NotSupported as exc:
            if unsupported_fix is None:
                raise self.error(f"NVML refused {refused}: {exc}", fix=refused_fix) from None
            raise self.error(f"{doing}: this GPU does not support it (NVML: {exc})", fix=unsupported_fix) from None
        except nv.NVMLError as exc:
            raise self.error(f"NVML refused {refused}: {exc}", fix=refused_fix) from None

    def close(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except self.nv.NVMLError:
            pass


class TwinSettingDevice:
    """A setting endpoint over HTTP (``route``) of the twin GPU device, or of the GPU settings agent
    (``harness.gpu.settings_agent``, which serves the same routes per GPU under ``/gpus/{gpu}`` with a key): GET
    reads it, POST sets it, DELETE resets it; a refusal (4xx) is ``error(f"{name} refused {what}: <its message>",
    fix)``; a 403 (no permission) names ``AS_ROOT``. The base of the cap and clock devices over HTTP."""

    route = "/v1/power_limit"
    what = "the power limit"
    error: type[DeviceSettingError] = DeviceSettingError
    fix = "choose a cap within the GPU's limits"

    def __init__(
        self, url: str, *, api_key: str | None = None, name: str = "the twin GPU", flag: str = "--twin-gpu"
    ) -> None:
        self.url = url.rstrip("/")
        self.name, self.flag = name, flag
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _call(self, method: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            with http_client(timeout=10.0, trust_env=False) as http:
                resp = http.request(method, f"{self.url}{self.route}", json=body, headers=self.headers)
        except httpx.HTTPError as exc:
            raise ServiceUnavailableError(
                f"{self.name} at {self.url} is unreachable ({exc!r})", fix=f"start it or fix {self.flag}"
            ) from None
        try:
            data = resp.json()
        except ValueError:
            data = {}
        msg = (data.get("error") or {}).get("message", resp.text) if isinstance(data, dict) else resp.text
        if resp.status_code == 401:
            raise self.error(
                f"{self.name} at {self.url} refused the key ({msg})",
                fix="give the harness the agent's key in HARNESS_SETTINGS_KEY (the same value the agent started with)",
            )
        if resp.status_code == 403:  # the twin's no-permission answer (fault settings_denied), as NVML's
            raise self.error(f"setting {self.what} needs root ({self.name}: {msg})", fix=AS_ROOT)
        if resp.status_code >= 400:
            raise self.error(f"{self.name} refused {self.what}: {msg}", fix=self.fix)
        return data if isinstance(data, dict) else {}


AGENT = "the GPU settings agent"
KEY_ENV = "HARNESS_SETTINGS_KEY"
"""The environment variable that holds the settings agent's key, for the agent and for its clients."""


def client_key(settings_url: str) -> str:
    """The settings agent's key from ``HARNESS_SETTINGS_KEY``; a missing one is refused before anything is asked of the
    agent (the agent itself also refuses a short one: ``harness.gpu.settings_cli.agent_key``)."""
    key = os.environ.get(KEY_ENV, "").strip()
    if not key:
        raise UsageError(
            f"--gpu-settings-url {settings_url} needs the agent's key in {KEY_ENV}",
            fix=f'export {KEY_ENV}=<the key the agent was started with> (docs/powercap.md, "The settings agent")',
        )
    return key


def agent_endpoint(settings_url: str, gpu: int | str) -> tuple[str, dict[str, Any]]:
    """The URL prefix of ``gpu`` at the settings agent and the client's keywords (its key: ``client_key``)."""
    key = client_key(settings_url)
    return f"{settings_url.rstrip('/')}/gpus/{gpu}", {"api_key": key, "name": AGENT, "flag": "--gpu-settings-url"}


def setting_device(
    twin: Callable[..., Any], agent: Callable[..., Any], nvml: Callable[..., Any],
    twin_gpu_url: str | None, gpu: int | str, settings_url: str | None,
) -> Any:  # fmt: skip
    """A setting's device for the engine's GPU: the twin GPU's endpoint when there is one, else the settings agent's
    (``--gpu-settings-url``: no root needed in this process), else NVML's."""
    if twin_gpu_url:
        return twin(twin_gpu_url)
    if settings_url:
        url, how = agent_endpoint(settings_url, gpu)
        return agent(url, **how)
    return nvml(gpu)

"""A GPU setting swept per pass (the power cap, the locked SM clock): the one controller both dimensions use.

``PassSetting`` resolves every label of the sweep against the device before the first cell (a bad one stops the
run with nothing changed), sets the pass's value (a no-op while it is already in force), reads back what the device
enforces, and restores the setting it found before the run's first set. That original is saved in the manifest
(``<key>.original_<unit>``, ``restored: false``) before anything is changed, so a run killed with SIGKILL is
restored by ``--resume`` at its end. A subclass says what the setting is: how to read it, resolve a label, set a
value and put the original back (``harness.gpu.power_cap``, ``harness.gpu.sm_clocks``).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Literal

from harness.core.errors import HarnessError

SettingMode = Literal["set", "record"]


class DeviceSettingError(HarnessError):
    """A GPU setting could not be read, resolved or set (permission, range or device error)."""

    exit_code = 9
    no_permission = False
    """NVML's no-permission (the settings agent answers it with a 403)."""


class PassSetting:
    """Applies one GPU setting per pass and restores the original; its state lives in the manifest under ``key``
    (a ``SweepManifest``'s ``setting_records(key)``, or a plain manifest dict's ``key``)."""

    key: ClassVar[str]
    """The manifest key of this setting's records (``power_cap``, ``sm_clocks``)."""
    unit: ClassVar[str]
    what: ClassVar[str]
    """What it is, for messages (``the power limit``)."""
    """Suffix of the recorded values (``w``, ``mhz``): ``original_<unit>``, ``targets_<unit>``, ``enforced_<unit>``."""

    def __init__(self, device: Any, mode: SettingMode, manifest: Any, save: Callable[[], None] = lambda: None) -> None:
        self.device = device
        self.mode = mode
        self.state: dict[str, Any] = (
            manifest.setting_records(self.key)
            if hasattr(manifest, "setting_records")
            else manifest.setdefault(self.key, {})
        )
        self.state["mode"] = mode
        self.save = save
        self.current: str | None = None
        self.targets: dict[str, float | None] = {}

    # --- what a setting is (subclasses) ------------------------------------------------------------------------
    def read(self) -> tuple[float | None, dict[str, Any]]:
        """(the value in force now, which restore puts back (None: the default, e.g. unlocked); facts for the manifest)."""
        raise NotImplementedError

    def resolve(self, label: str, facts: dict[str, Any]) -> float | None:
        """The device value of a label (None: the default); raises ``DeviceSettingError`` for one it cannot take."""
        raise NotImplementedError

    def put(self, value: float | None) -> None:
        """Make ``value`` the setting in force (None: the device's default)."""
        raise NotImplementedError

    def enforced(self) -> float | None:
        """What the device enforces now (None: the default / unknown)."""
        raise NotImplementedError

    def applied_text(self, label: str | None, value: float | None) -> str:
        """The console line after ``apply(label)`` left ``value`` enforced."""
        raise NotImplementedError

    def restored_text(self, value: float | None) -> str:
        """The console line after a restore left ``value`` in force."""
        raise NotImplementedError

    # --- the controller ----------------------------------------------------------------------------------------
    @property
    def original_key(self) -> str:
        return f"original_{self.unit}"

    def begin(self, labels: list[str]) -> dict[str, Any]:
        """Read the device, resolve every label (refusing bad ones before anything runs), and remember the original:
        the value in force now, unless an earlier session of this run set one and never restored it (killed): then
        the original that session found is kept, since the value in force now is that session's."""
        current, facts = self.read()
        self.targets = {label: self.resolve(label, facts) for label in labels}
        if self.state.get("restored", True) or self.original_key not in self.state:
            self.state[self.original_key] = current
        self.state.update({**facts, f"targets_{self.unit}": dict(self.targets)})
        self.save()
        return facts

    def apply(self, label: str | None) -> float | None:
        """Make ``label`` the setting in force (``set`` mode; nothing in ``record`` mode); returns what is enforced."""
        changed = label is not None and self.mode == "set" and label != self.current
        if changed and label is not None:
            self.state["restored"] = False
            self.save()
            try:
                self.put(self.targets[label])
            except HarnessError:
                self._note_unchanged()
                raise
            self.current = label
        enforced = self.enforced()
        if changed and label is not None:
            self.state.setdefault(f"enforced_{self.unit}", {})[label] = enforced  # what each label enforced
            self.save()
        return enforced

    def restore(self) -> str | None:
        """Put the original back (``set`` mode, once something was set); the console line, None when nothing to do."""
        if self.mode != "set" or self.state.get("restored", True) or self.original_key not in self.state:
            return None
        self.put(self.state[self.original_key])
        self.current = None
        self.state["restored"] = True
        try:
            self.save()
        except HarnessError:  # the setting is back; a manifest still saying "not restored" only makes --resume redo it
            pass
        return self.restored_text(self.enforced())

    def close(self) -> None:
        close = getattr(self.device, "close", None)
        if callable(close):
            close()

    def _note_unchanged(self) -> None:
        """After a failed set: if the original is still in force, nothing needs restoring (no false alarm)."""
        try:
            if self.enforced() == self.state.get(self.original_key):
                self.state["restored"] = True
                self.save()
        except HarnessError:
            pass

"""Students' kernels start warm on the classroom hub: the classroom's python3 kernelspec names the provisioner that
forks each kernel from the student's server's zygote (`twoprim.learner.warm_kernels`, `twoprim.learner.zygote`), and
this module, a Jupyter server extension enabled on students' servers, starts that zygote as the server starts, while
the student logs in and opens a notebook. `./course hub` writes the kernelspec (`kernel_spec`) and enables the
extension (`twoprim.classroom.hub_config`)."""

from __future__ import annotations

from twoprim.classroom import notices
from twoprim.learner.warm_kernels import LOG, NAME, WarmProvisioner, Zygote, stop_zygotes, zygote

__all__ = ["NAME", "WarmProvisioner", "Zygote", "kernel_spec", "zygote", "stop_zygotes"]


def kernel_spec(python: str) -> dict:
    """The classroom's python3 kernelspec (`notices.kernel_spec`: ipykernel with the memory-limit notice), its
    kernels forked from the student's zygote."""
    spec = notices.kernel_spec(python)
    spec.setdefault("metadata", {})["kernel_provisioner"] = {"provisioner_name": NAME}
    return spec


# --- the server extension: the zygote starts with the student's server --------------------------------------------


def _jupyter_server_extension_points() -> list[dict]:
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp) -> None:
    """Start this server's zygote now, in the background: ready by the time the student opens a notebook."""
    import atexit

    atexit.register(stop_zygotes)
    if zygote().start(serverapp.log):
        serverapp.log.info("%s: starting the zygote for this server's kernels", LOG)
    else:
        serverapp.log.warning(
            "%s: no zygote for this server (%s): its kernels start the usual way", LOG, zygote().failure
        )

"""The event bus (broadcaster: memory://, redis://, postgres://) every process publishes and
listens on: `core` the bus itself, `postgres` and `redis_backend` its shared backends, `names` the
channel names brokers accept. Nothing here imports back into `core` from a backend."""

from backend.bus.core import BUS_GAP, TASK_CHANNEL, BusState, BusUnavailable, EventBus, MissingBusBackend
from backend.bus.names import bus_channel_name

__all__ = [
    "BUS_GAP",
    "TASK_CHANNEL",
    "BusState",
    "BusUnavailable",
    "EventBus",
    "MissingBusBackend",
    "bus_channel_name",
]

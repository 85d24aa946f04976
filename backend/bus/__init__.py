"""The event bus (broadcaster: memory://, redis://, postgres://) every process publishes and
listens on: `core` the bus itself, `link` its connection to the broker (broadcaster's public API),
`outbox` its ordered sender, `follow` a service's lasting subscription, `postgres` and
`redis_backend` its shared backends, `names` the channel names brokers accept. Nothing here imports
back into `core` from a backend."""

from backend.bus.core import BUS_GAP, TASK_CHANNEL, BusState, EventBus, MissingBusBackend
from backend.bus.names import bus_channel_name
from backend.bus.outbox import BusUnavailable

__all__ = [
    "BUS_GAP",
    "TASK_CHANNEL",
    "BusState",
    "BusUnavailable",
    "EventBus",
    "MissingBusBackend",
    "bus_channel_name",
]

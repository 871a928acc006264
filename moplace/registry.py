"""Name -> object registries for objectives, baselines and searchers (used by the CLI)."""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

from .errors import MoplaceError, did_you_mean

T = TypeVar("T")


class Registry(Generic[T]):
    """A mapping from unique names to objects; refuses duplicates, lists names on a miss."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> T:
        """Register ``item`` as ``name``; a name can be registered once."""
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._items[name] = item
        return item

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of `add`."""
        return lambda item: self.add(name, item)

    def remove(self, name: str) -> T:
        """Unregister ``name`` (registered by `add`); returns what it named."""
        if name not in self._items:
            raise MoplaceError(f"unknown {self.kind} {name!r}{did_you_mean(name, self._items)}; "
                               f"known: {', '.join(self._items)}")
        return self._items.pop(name)

    def __getitem__(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise MoplaceError(f"unknown {self.kind} {name!r}{did_you_mean(name, self._items)}; "
                               f"known: {', '.join(self._items)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def names(self) -> list[str]:
        return list(self._items)

"""A small web shop: add items to the cart (any order), fix the cart, check out. Checking out with a
wrong cart fails the task; items are removed one unit at a time on the cart page."""

from __future__ import annotations

import random

from tempering.envs.gui.app import App, pick
from tempering.envs.gui.screen import Element, Screen, State, layout

PRODUCTS = ["Lamp", "Mug", "Pen", "Sock", "Hat", "Book", "Soap", "Tea", "Cup", "Bag"]


class ShopApp(App):
    kind = "shop"

    @classmethod
    def generate(cls, rng: random.Random, difficulty: int) -> dict:
        products = pick(rng, PRODUCTS, min(3 + difficulty, len(PRODUCTS)))
        want = {p: rng.randint(1, 1 + difficulty // 2) for p in pick(rng, products, min(1 + difficulty // 2, 3))}
        cart: dict[str, int] = {}
        if difficulty >= 1 and rng.random() < 0.5:
            cart[rng.choice(products)] = 1
        parts = [f"{q} {p}" for p, q in want.items()]
        return {
            "kind": cls.kind,
            "products": products,
            "want": want,
            "texts": [],
            "init": {"page": "shop", "cart": cart, "done": None},
            "instruction": f"Shop: buy {', '.join(parts)}.",
        }

    def screen(self, state: State) -> Screen:
        cart = state["cart"]
        if state["page"] == "shop":
            els = [Element("", "link", "Cart", state=str(sum(cart.values())), on_click=lambda s: s.update(page="cart"))]
            for p in self.spec["products"]:

                def add(s, p=p):
                    s["cart"][p] = s["cart"].get(p, 0) + 1

                els.append(Element("", "button", f"Add {p}", on_click=add))
            return Screen("Shop", layout(els))
        els = [Element("", "link", "Shop", on_click=lambda s: s.update(page="shop"))]
        for p, q in cart.items():

            def remove(s, p=p):
                s["cart"][p] -= 1
                if not s["cart"][p]:
                    del s["cart"][p]

            els += [Element("", "text", p, state=str(q)), Element("", "button", f"Remove {p}", on_click=remove)]
        els.append(Element("", "button", "Checkout", on_click=self._checkout))
        return Screen("Cart", layout(els))

    def _gaps(self, state: State) -> tuple[dict[str, int], dict[str, int]]:
        """(units missing, units extra) per product."""
        cart, want = state["cart"], self.spec["want"]
        missing = {p: q - cart.get(p, 0) for p, q in want.items() if q > cart.get(p, 0)}
        extra = {p: q - want.get(p, 0) for p, q in cart.items() if q > want.get(p, 0)}
        return missing, extra

    def _checkout(self, state: State) -> None:
        if state["done"] is None:
            missing, extra = self._gaps(state)
            state["done"] = "bad" if missing or extra else "ok"

    def remaining(self, state: State) -> int | None:
        if state["done"] is not None:
            return 0 if state["done"] == "ok" else None
        missing, extra = self._gaps(state)
        m, x = sum(missing.values()), sum(extra.values())
        if state["page"] == "shop":
            return m + 1 + x + 1
        return (1 + m + 1 if m else 0) + x + 1

    def plan(self, state: State) -> list[str]:
        if state["done"] is not None:
            return []
        missing, extra = self._gaps(state)
        steps = []
        if missing:
            steps += ["open shop"] if state["page"] == "cart" else []
            steps += [f"add {p}" for p, q in missing.items() for _ in range(q)]
        if missing or state["page"] == "shop":
            steps.append("open cart")
        steps += [f"remove {p}" for p, q in extra.items() for _ in range(q)]
        return steps + ["checkout"]

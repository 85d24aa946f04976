"""Render the app's PNG icons from their SVG sources in Chromium (run after editing an icon SVG).

    .venv/bin/python scripts/render-icons.py

Writes frontend_py/web/app/icon-192.png, icon-512.png and icon-maskable-512.png; they are committed,
so serving the app needs no image tooling.
"""

import asyncio
import os
from pathlib import Path

from playwright.async_api import async_playwright

APP = Path(__file__).resolve().parents[1] / "frontend_py" / "web" / "app"
CHROMIUM = os.environ.get("TURNWISE_CHROMIUM", "/usr/bin/chromium")
ICONS = [
    ("icon.svg", "icon-192.png", 192),
    ("icon.svg", "icon-512.png", 512),
    ("icon-maskable.svg", "icon-maskable-512.png", 512),
]


async def main() -> None:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            for source, target, size in ICONS:
                page = await browser.new_page(viewport={"width": size, "height": size})
                svg = (APP / source).read_text()
                html = (
                    "<html><body style='margin:0;background:transparent'>"
                    f"<div style='width:{size}px;height:{size}px'>{svg}</div></body></html>"
                )
                await page.set_content(html.replace("<svg ", f"<svg width='{size}' height='{size}' ", 1))
                await page.screenshot(path=str(APP / target), omit_background=True)
                await page.close()
                print("wrote", APP / target)
        finally:
            await browser.close()


if __name__ == "__main__":
    asyncio.run(main())

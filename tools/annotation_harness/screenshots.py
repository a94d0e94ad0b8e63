"""Runs in Label Studio's own environment with Playwright: logs in to a running Label Studio as its user and saves a
picture of each page asked for, in Debian's Chromium (no browser download).

    python screenshots.py URL USER PASSWORD PAGES_JSON    # PAGES_JSON: [{"path": "/projects/1/data?task=3",
                                                          #               "file": "out.png"}, ...]
"""
import json
import sys

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"


def main() -> None:
    url, user, password, pages = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.goto(f"{url}/user/login")
        page.fill("input[name=email]", user)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_load_state("networkidle")
        for shot in pages:
            page.goto(f"{url}{shot['path']}")
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(3000)  # the labelling interface draws after the page loads
            page.screenshot(path=shot["file"])
        browser.close()


if __name__ == "__main__":
    main()

"""Tests of the dashboard in a real browser: Debian's Chromium, driven by Selenium."""

"""The built-in app kinds of the offline GUI environment."""

from __future__ import annotations

from tempering.envs.gui.app import App
from tempering.envs.gui.apps.files import FilesApp
from tempering.envs.gui.apps.form import FormApp
from tempering.envs.gui.apps.mail import MailApp
from tempering.envs.gui.apps.settings import SettingsApp
from tempering.envs.gui.apps.shop import ShopApp
from tempering.envs.gui.apps.todo import TodoApp

APPS: dict[str, type[App]] = {cls.kind: cls for cls in (FormApp, SettingsApp, FilesApp, ShopApp, MailApp, TodoApp)}
"""App kind -> class."""

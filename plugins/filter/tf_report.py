"""Filter ``tf_report_view``: the run report's view of the verdict's summary. The code is
shared with the action that draws the page, so it lives in
plugins/plugin_utils/tf_report_view.py; its documentation is tf_report_view.yml."""

from __future__ import annotations

from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_report_view import tf_report_view


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"tf_report_view": tf_report_view}

"""The jobs list and a job's page, with their actions: filters, bulk retry / cancel / purge
(selected, or all matching after a counted confirmation), one job's retry, cancel (a running
one's too) and purge.
"""

from __future__ import annotations

from http import HTTPStatus

from pgqueue.dashboard import actions, data, filters, params
from pgqueue.dashboard.pages import PAGE_SIZE, Pages
from pgqueue.dashboard.request import Request, Response
from pgqueue.dashboard.urls import _job_id, _url, job_path
from pgqueue.job import FINISHED_STATES, JobState
from pgqueue.schema import KEPT_ERRORS

__all__ = ["JobViews"]


class JobViews(Pages):
    """The views of the jobs list and of one job (mixed into
    :class:`~pgqueue.dashboard.Dashboard`).

    Example::

        dashboard.handle(Request(method="GET", path="/jobs", query={"state": ["failed"]}))
    """

    def _jobs(self, request: Request, query: params.QueryParams) -> Response:
        search = query.id
        if search:
            # As typed first (ids may start or end with spaces), then as the box trimmed it.
            typed = params.check_job_id(request.query["id"][0]) if request.query.get("id") else ""
            for candidate in dict.fromkeys([typed, search]):
                if candidate and self.queue.status(candidate) is not None:
                    return Response.redirect(_url(request.root, *job_path(candidate)))
        known = self._known_tasks()
        where = filters.job_filter(query, known, now=self._now())
        page = data.read_jobs(
            self.queue, where=where, cursor=query.cursor_text, limit=PAGE_SIZE, now=self._now()
        )
        chosen_filters = filters.filter_params(request.query)
        bulk = [
            a for a in actions.BULK_ACTIONS if request.may(a) and not self.read_only and page.jobs
        ]
        return self._page(
            request,
            "jobs.html",
            query,
            page=page,
            states=[str(s) for s in JobState],
            chosen=[str(s) for s in query.states],
            filters=chosen_filters,
            known_tasks=known,
            tasks=where.tasks,
            within=list(params.WITHIN),
            bulk=bulk,
            scan=data.SEARCH_SCAN,
            search=search,
            not_found=bool(search),
            first_page=query.cursor is None,
            active="jobs",
        )

    def _bulk_confirm(self, request: Request, query: params.QueryParams) -> Response:
        action = actions.check_bulk_action(query.action or "")
        if not request.may(action) or self.read_only:
            return self._error(request, HTTPStatus.FORBIDDEN, f"You may not {action} jobs here.")
        where = actions.bulk_filter(
            action, filters.job_filter(query, self._known_tasks(), now=self._now())
        )
        count, capped = data.count_matching(self.queue, where)
        return self._page(
            request,
            "confirm_jobs.html",
            query,
            action=action,
            count=count,
            capped=capped,
            states=[str(s) for s in where.states],
            filters=filters.filter_params(request.query),
            tasks=where.tasks,
            active="jobs",
        )

    def _bulk_action(self, request: Request, query: params.QueryParams, action: str) -> Response:
        action = actions.check_bulk_action(action)
        form = params.check_query(request.form)
        if form.scope == "all":
            where = actions.bulk_filter(
                action, filters.job_filter(form, self._known_tasks(), now=self._now())
            )
            ids = data.matching_ids(self.queue, where)
        else:
            ids = params.check_ids(request.form, limit=PAGE_SIZE)
        done = actions.apply(self.queue, action, ids, now=self._now()) if ids else 0
        message = actions.bulk_message(action, done, len(ids))
        back = filters.filter_params(request.form)
        return Response.redirect(_url(request.root, "jobs", {**back, "message": message}))

    def _job(self, request: Request, query: params.QueryParams, job_id: str = "") -> Response:
        job_id = _job_id(request, job_id)
        status = self.queue.status(job_id)
        if status is None and job_id.rpartition("/")[2] in actions.ACTIONS:
            # jobs/ID/retry opened with GET (a link, a reload): the action's URL, not a job's.
            return self._error(request, HTTPStatus.METHOD_NOT_ALLOWED, "Method not allowed")
        if status is None:
            return self._error(request, HTTPStatus.NOT_FOUND, f"No job {job_id!r}.")
        around = data.read_surroundings(
            self.queue, job_id, locked_by=status.locked_by, now=self._now()
        )
        now = around.now
        allowed = [
            a for a, states in actions.ACTIONS.items() if status.state in states and request.may(a)
        ]
        errors = data.read_attempt_errors(self.queue, job_id)
        # Cancelled while it ran: the row keeps the lease the worker no longer renews, and the
        # handler may still be running until the worker's next heartbeat tells it.
        cancel_requested = (
            status.state is JobState.CANCELLED
            and status.locked_until is not None
            and status.locked_until > now
        )
        return self._page(
            request,
            "job_body.html" if query.fragment else "job.html",
            query,
            job=status,
            errors=errors,
            runs=data.error_runs(errors),
            current_run=data.in_current_run(errors, status.attempts, status.started_at),
            holder=around.holder,
            holder_live=around.holder_live,
            around=around,
            cancel_requested=cancel_requested,
            live=status.state not in FINISHED_STATES or cancel_requested,
            # A durable job's steps, sleep or wait (docs/durable.md); [] for other jobs.
            steps=self.queue.steps(job_id),
            kept_errors=KEPT_ERRORS,
            now=now,
            allowed=allowed,
            active="jobs",
        )

    def _job_action(self, request: Request, query: params.QueryParams, *where: str) -> Response:
        # jobs/ID/ACTION, or job/ACTION?id=ID for the ids a path cannot carry.
        job_id, action = ("", where[0]) if len(where) == 1 else where
        job_id = _job_id(request, job_id)
        actions.check_action(action)
        before = self.queue.status(job_id)
        running = before is not None and before.state is JobState.PROCESSING
        # From its own page a running job may be cancelled too (cooperatively: Queue.cancel
        # with running=True); bulk cancels leave running jobs alone.
        done = actions.apply(self.queue, action, [job_id], now=self._now(), running=running)
        verb = actions.VERBS[action]
        message = (
            f"Job {verb}." if done else f"Nothing to {action}: the job is not in a state for it."
        )
        if done and running and action == "cancel":
            message = "Cancel requested: the worker stops the handler at its next heartbeat."
        if action == "purge" and done:
            return Response.redirect(_url(request.root, "jobs", {"message": message}))
        path, given = job_path(job_id)
        return Response.redirect(_url(request.root, path, {**given, "message": message}))

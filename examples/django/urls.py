"""One page: this worker's cron and the latest runs of the job, as the model recorded them."""
import os

from django.http import HttpRequest, JsonResponse
from django.urls import path

from leasecron.contrib.django import cron
from ticks.models import Tick


def index(request: HttpRequest) -> JsonResponse:
    ticks = Tick.objects.order_by("-id")[:5]
    return JsonResponse({"pid": os.getpid(), "cron": repr(cron), "ticks": [tick.as_dict() for tick in ticks]})


urlpatterns = [path("", index)]

"""The test project's URLconf: the leasecron dashboard at ``/cron/``, and a login page."""

from django.contrib.auth import authenticate, login
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.middleware.csrf import get_token
from django.urls import include, path
from django.utils.html import escape


def login_page(request: HttpRequest) -> HttpResponse:
    """A form of user name and password (CSRF-protected, as every POST of the project); a good
    pair logs the user in and goes to ``next``."""
    if request.method == "POST":
        user = authenticate(request, username=request.POST.get("username"), password=request.POST.get("password"))
        if user is None:
            return HttpResponse("wrong user name or password", status=403, content_type="text/plain")
        login(request, user)
        return HttpResponseRedirect(request.POST.get("next") or "/cron/")
    return HttpResponse(
        '<form method="post"><input type="hidden" name="csrfmiddlewaretoken" value="%s">'
        '<input type="hidden" name="next" value="%s"><input name="username"><input name="password" type="password">'
        "<button>Log in</button></form>" % (get_token(request), escape(request.GET.get("next", "")))
    )


urlpatterns = [
    path("login/", login_page),
    path("cron/", include("leasecron.contrib.django.urls")),
]

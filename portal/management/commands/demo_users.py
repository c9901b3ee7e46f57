"""Create one demo user per role (password `demo`). Only the demo uses this; it refuses outside demo settings."""

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandError

from portal.tenancy.roles import Role

DEMO_USERS = {
    "member": Role.TENANT_MEMBER,
    "lead": Role.TENANT_LEAD,
    "approver": Role.APPROVER,
    "security": Role.SECURITY_APPROVER,
    "security2": Role.SECURITY_APPROVER,  # exceptions need two distinct security approvals
    "admin": Role.PLATFORM_ADMIN,
    "finance": Role.FINANCE,
}
# What each demo login is for, as the demo's banner and the README say it.
DEMO_PURPOSE = {
    "member": "tenant member of ml-research: catalog, generator, validator, pending pods, access exceptions",
    "lead": "tenant lead of ml-research: a member who also requests quota",
    "approver": "approves quota requests",
    "security": "approves access exceptions (adminAccess, privileged), with security2",
    "security2": "the second security approval an exception needs",
    "admin": "platform admin: clusters, inventory, offerings, audit, Django admin",
    "finance": "chargeback statements and exports",
}


class Command(BaseCommand):
    help = "Create the demo users (one per role, password 'demo'). Demo settings only."

    def handle(self, *args: object, **options: object) -> None:
        if not getattr(settings, "PORTAL_DEMO", False):
            raise CommandError("demo users exist only under portal.settings.demo")
        for username, role in DEMO_USERS.items():
            user, _ = User.objects.get_or_create(username=username, defaults={"email": f"{username}@demo.invalid"})
            user.set_password("demo")
            user.is_staff = role == Role.PLATFORM_ADMIN
            user.is_superuser = role == Role.PLATFORM_ADMIN
            user.save()
            user.groups.add(Group.objects.get(name=role.value))
            if role == Role.TENANT_LEAD:
                user.groups.add(Group.objects.get(name=Role.TENANT_MEMBER.value))
        self.stdout.write("demo logins (password 'demo'): " + ", ".join(
            f"{u} ({r.value})" for u, r in DEMO_USERS.items()))

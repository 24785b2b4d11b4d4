"""Give the people and audit tables this app's own names (``access_team`` ...), now that the models live
here (see ``0001_initial``), and move their content types (and so any permissions granted on them) from
the ``streamforge_web`` app label to ``access``."""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

MODELS = ("team", "membership", "auditevent")


def _relabel_content_types(apps: Apps, schema_editor: BaseDatabaseSchemaEditor, old: str, new: str) -> None:
    """Move the models' content types from app label ``old`` to ``new``, unless ``new`` already has one
    (a fresh database has neither: they are created after the migrations)."""
    content_type = apps.get_model("contenttypes", "ContentType")
    rows = content_type.objects.using(schema_editor.connection.alias)
    for model in MODELS:
        if not rows.filter(app_label=new, model=model).exists():
            rows.filter(app_label=old, model=model).update(app_label=new)


def forwards(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """streamforge_web -> access."""
    _relabel_content_types(apps, schema_editor, "streamforge_web", "access")


def backwards(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """access -> streamforge_web."""
    _relabel_content_types(apps, schema_editor, "access", "streamforge_web")


class Migration(migrations.Migration):
    dependencies = [
        ("access", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.RenameIndex(
            model_name="auditevent",
            new_name="access_audi_target__69b352_idx",
            old_name="streamforge_target__6a0552_idx",
        ),
        migrations.AlterModelTable(name="auditevent", table=None),
        migrations.AlterModelTable(name="membership", table=None),
        migrations.AlterModelTable(name="team", table=None),
        migrations.RunPython(forwards, backwards),
    ]

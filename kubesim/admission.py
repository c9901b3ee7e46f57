"""ValidatingAdmissionPolicy admission (admissionregistration.k8s.io/v1), as the API server applies it.

Creates and updates (POST, PUT, every PATCH flavour and server-side apply, dry run included) of every served kind
except the admissionregistration.k8s.io kinds themselves pass through `PolicyAdmission.admit` right before the
store commits them. The semantics follow the API server's `validating` admission plugin
(k8s.io/apiserver/pkg/admission/plugin/policy/validating and .../policy/generic, .../policy/matching):

- A binding (`spec.policyName`) applies when the policy's `matchConstraints` and the binding's `matchResources`
  both match: `resourceRules` / `excludeResourceRules` (operations, apiGroups, apiVersions, resources with `*`,
  `res/sub`, `*/sub`, `res/*`, `scope`, `resourceNames`), `namespaceSelector` (labels of the request's Namespace;
  cluster-scoped objects other than Namespaces always match it) and `objectSelector` (new or old object labels).
- Params: `spec.paramKind` + binding `spec.paramRef` (`name` or `selector`, `namespace` defaulting to the
  request's, `parameterNotFoundAction` Allow|Deny); no paramKind or no paramRef means `params` is null.
- CEL: `object`, `oldObject`, `params`, `namespaceObject`, `request` and `variables` (each composited variable is
  evaluated lazily, at most once per request and param, and may read earlier ones), the standard macros, the
  strings, math, optional and `cel.bind` extensions. The Kubernetes-specific libraries (`authorizer`, `quantity`,
  `url`, `ip`, `cidr`, regex `find`, list helpers) are not provided: expressions using them fail to compile.
- `matchConditions` (all must be true), then `validations[]` with `message`, `messageExpression` and `reason`.
- `failurePolicy` Fail (default) or Ignore decides what a compile error, a runtime error or a configuration error
  (missing param with `Deny`, unknown paramKind, bad selector) does.
- Binding `validationActions`: Deny (the request fails with the API server's Status), Warn (a `Warning` header) and
  Audit (no visible effect here).

A policy is compiled once per resourceVersion; nothing in a malformed policy can raise out of `admit`.
"""

from __future__ import annotations

import re
import threading
import unicodedata
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_math, ext_optional, ext_strings

from . import resources as res
from .errors import ApiError
from .store import Store

POLICIES = "validatingadmissionpolicies"
BINDINGS = "validatingadmissionpolicybindings"
MAX_MESSAGE_BYTES = 5 * 1024  # celconfig.MaxEvaluatedMessageExpressionSizeBytes
REASON_CODES = {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413, "Invalid": 422}
PARAM_NOT_FOUND = "no params found for policy binding with `Deny` parameterNotFoundAction"
DEFAULT_USER = "kubernetes-admin"
DEFAULT_GROUPS = ("system:masters", "system:authenticated")

_STRING_LITERAL = re.compile(r"'''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"", re.DOTALL)
_VARIABLE_REF = re.compile(r"(?<![\w.])variables\s*\.\s*([A-Za-z_]\w*)")
_STATUS_PREFIX = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX = re.compile(r"\s*\[[A-Z_]+\]\s*$")
_MISSING_KEY = re.compile(r'^Key not found in map ?: ?"?(.*?)"?$')


# ---------------------------------------------------------------------------------------------- request
@dataclass(frozen=True)
class Attributes:
    """What admission knows about a write besides the objects (admission.Attributes)."""

    operation: str  # CREATE | UPDATE
    rt: res.ResourceType
    namespace: str  # "" for cluster-scoped kinds; a Namespace's own name for Namespaces
    name: str  # as the request names it ("" for a create with generateName)
    subresource: str = ""
    dry_run: bool = False
    username: str = DEFAULT_USER
    groups: tuple[str, ...] = DEFAULT_GROUPS


@dataclass
class Verdict:
    """The outcome of admission: warnings for the response, and the denial to raise (if any)."""

    warnings: list[str] = field(default_factory=list)
    denial: ApiError | None = None


class _ConfigError(Exception):
    """A policy or binding cannot be applied to this request (the API server's configuration errors)."""


@dataclass(frozen=True)
class _Decision:
    """A denying decision of one validation (admitting decisions are not kept)."""

    message: str
    reason: str = ""  # "" becomes Invalid


# ---------------------------------------------------------------------------------------------- CEL
_env_lock = threading.Lock()
_env: cel.Env | None = None


def _environment() -> cel.Env:
    global _env
    with _env_lock:
        if _env is None:
            dyn = cel.Type.DYN
            _env = cel.NewEnv(
                variables={
                    "object": dyn,
                    "oldObject": dyn,
                    "params": dyn,
                    "namespaceObject": dyn,
                    "request": dyn,
                    "variables": cel.Type.Map(cel.Type.STRING, dyn),
                },
                extensions=[
                    ext_strings.ExtStrings(),
                    ext_math.ExtMath(),
                    ext_optional.ExtOptional(),
                    ext_bindings.ExtBindings(),
                ],
            )
        return _env


def _clean_cel_message(raw: str) -> str:
    """cel-cpp's status text without the status code decoration, phrased like cel-go where they differ."""
    text = _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", raw.strip()))
    missing = _MISSING_KEY.match(text)
    return f"no such key: {missing.group(1)}" if missing else text


@dataclass(frozen=True)
class _Program:
    """One compiled expression; `error` is the compile error as the API server words it."""

    expression: str
    program: cel.Expression | None
    error: str | None
    variables: tuple[str, ...]  # the composited variables it reads


def _blank_literals(expression: str) -> str:
    return _STRING_LITERAL.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), expression)


def _variable_references(expression: str, known: Iterable[str]) -> tuple[str, tuple[str, ...]]:
    """The `variables.<name>` an expression reads (outside string literals): ('', names), or (the type checker's
    error, ()) when one of them is not among `known` (the variables declared before it)."""
    blank = _blank_literals(expression)
    names: list[str] = []
    allowed = set(known)
    for m in _VARIABLE_REF.finditer(blank):
        name = m.group(1)
        if name not in allowed:
            line = blank.count("\n", 0, m.start(1)) + 1
            column = m.start(1) - (blank.rfind("\n", 0, m.start(1)) + 1)
            source = expression.split("\n")[line - 1]
            pointer = "." * column + "^"
            return f"ERROR: <input>:{line}:{column + 1}: undefined field '{name}'\n | {source}\n | {pointer}", ()
        if name not in names:
            names.append(name)
    return "", tuple(names)


def compile_expression(expression: Any, known_variables: Iterable[str], result: cel.Type | None) -> _Program:
    """Compile an expression; `result` is the required type (BOOL, STRING) or None for any."""
    if not isinstance(expression, str) or not expression.strip():
        return _Program(str(expression), None, "compilation failed: expression must be a non-empty string", ())
    undefined, names = _variable_references(expression, known_variables)
    if undefined:
        return _Program(expression, None, f"compilation failed: {undefined}", ())
    try:
        program = _environment().compile(expression)
    except Exception as exc:  # noqa: BLE001 - the binding raises RuntimeError with a status text
        return _Program(expression, None, f"compilation failed: {_clean_cel_message(str(exc))}", ())
    if result is not None and program.return_type() not in (result, cel.Type.DYN):
        return _Program(expression, None, f"must evaluate to {result.name().lower()}", ())
    return _Program(expression, program, None, names)


# ---------------------------------------------------------------------------------------------- policies
def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


@dataclass(frozen=True)
class _Validation:
    program: _Program
    message: str
    message_program: _Program | None
    reason: str

    def decide(self, evaluation: _Evaluation, fail: bool) -> _Decision | None:
        if self.program.error is not None:
            return _Decision(f"compilation error: {self.program.error}") if fail else None
        value, error = evaluation.evaluate(self.program)
        if error is not None:
            return _Decision(f"expression '{self.program.expression}' resulted in error: {error}") if fail else None
        if value is True:
            return None
        return _Decision(self._message(evaluation), self.reason or "Invalid")

    def _message(self, evaluation: _Evaluation) -> str:
        if self.message_program is not None and self.message_program.error is None:
            value, error = evaluation.evaluate(self.message_program)
            if error is None and isinstance(value, str):
                text = value.strip()
                if text and len(text.encode()) <= MAX_MESSAGE_BYTES and "\n" not in text:
                    return text
        if self.message.strip():
            return self.message.strip()
        return f"failed expression: {self.program.expression.strip()}"


@dataclass(frozen=True)
class CompiledPolicy:
    """A ValidatingAdmissionPolicy ready to evaluate."""

    name: str
    failure_policy: str  # Fail (the default) or Ignore; any other value denies with "unrecognized failure policy"
    constraints: dict | None
    param_type: res.ResourceType | None
    config_error: str | None
    variables: dict[str, _Program]
    match_conditions: tuple[_Program, ...]
    validations: tuple[_Validation, ...]

    @property
    def fail(self) -> bool:
        """Whether errors deny (validator.policyDecisionActionForError)."""
        return self.failure_policy != "Ignore"

    @classmethod
    def compile(cls, policy: dict) -> CompiledPolicy:
        spec = _dict(policy.get("spec"))
        variables: dict[str, _Program] = {}
        for entry in _list(spec.get("variables")):
            entry = _dict(entry)
            variables[str(entry.get("name", ""))] = compile_expression(entry.get("expression"), list(variables), None)
        known = list(variables)
        conditions = tuple(
            compile_expression(_dict(c).get("expression"), known, cel.Type.BOOL)
            for c in _list(spec.get("matchConditions"))
        )
        param_type, config_error = _param_type(spec.get("paramKind"))
        return cls(
            name=_policy_name(policy),
            failure_policy=_failure_policy(spec),
            constraints=_constraints(spec),
            param_type=param_type,
            config_error=config_error,
            variables=variables,
            match_conditions=conditions,
            validations=tuple(_compile_validation(_dict(v), known) for v in _list(spec.get("validations"))),
        )

    @classmethod
    def broken(cls, policy: dict, error: Exception) -> CompiledPolicy:
        """A policy whose spec could not even be read: every matching request gets its failurePolicy."""
        spec = _dict(policy.get("spec"))
        return cls(
            name=_policy_name(policy),
            failure_policy=_failure_policy(spec),
            constraints=_constraints(spec),
            param_type=None,
            config_error=f"invalid policy: {error}",
            variables={},
            match_conditions=(),
            validations=(),
        )

    def decisions(self, evaluation: _Evaluation) -> list[_Decision]:
        """The denying decisions of this policy for one (request, param) evaluation (validator.Validate)."""
        matched, error = self._match_conditions(evaluation)
        if error is not None:
            return [_Decision(error)] if self.fail else []
        if not matched:
            return []
        return [d for v in self.validations if (d := v.decide(evaluation, self.fail)) is not None]

    def _match_conditions(self, evaluation: _Evaluation) -> tuple[bool, str | None]:
        errors: list[str] = []
        for program in self.match_conditions:
            if program.error is not None:
                errors.append(f"compilation error: {program.error}")
                continue
            value, error = evaluation.evaluate(program)
            if error is not None:
                errors.append(f"expression '{program.expression}' resulted in error: {error}")
            elif value is False:
                return False, None
        if not errors:
            return True, None
        return False, errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def _policy_name(policy: dict) -> str:
    return str(_dict(policy.get("metadata")).get("name", ""))


def _failure_policy(spec: dict) -> str:
    return str(spec.get("failurePolicy") or "Fail")


def _constraints(spec: dict) -> dict | None:
    constraints = spec.get("matchConstraints")
    return constraints if isinstance(constraints, dict) else None


def _compile_validation(validation: dict, known: list[str]) -> _Validation:
    message_expression = validation.get("messageExpression")
    return _Validation(
        program=compile_expression(validation.get("expression"), known, cel.Type.BOOL),
        message=str(validation.get("message") or ""),
        message_program=compile_expression(message_expression, known, cel.Type.STRING) if message_expression else None,
        reason=str(validation.get("reason") or ""),
    )


def _param_type(param_kind: Any) -> tuple[res.ResourceType | None, str | None]:
    if param_kind is None:
        return None, None
    kind = _dict(param_kind)
    api_version, name = str(kind.get("apiVersion", "")), str(kind.get("kind", ""))
    rt = res.BY_KIND.get((api_version, name))
    if rt is None:
        group, _, version = api_version.rpartition("/")
        return None, f"failed to find resource referenced by paramKind: '{group}/{version}, Kind={name}'"
    return rt, None


# ---------------------------------------------------------------------------------------------- evaluation
class _Evaluation:
    """One activation (request + param): evaluates programs, each composited variable at most once."""

    def __init__(self, policy: CompiledPolicy, data: dict[str, Any]) -> None:
        self._policy = policy
        self._data = data
        self._variables: dict[str, tuple[Any, str | None]] = {}

    def evaluate(self, program: _Program) -> tuple[Any, str | None]:
        """(value, None) or (None, runtime error text). The program must have compiled."""
        values: dict[str, Any] = {}
        for name in program.variables:
            value, error = self._variable(name)
            if error is not None:
                return None, error
            values[name] = value
        if program.program is None:
            return None, program.error or "expression did not compile"
        try:
            result = program.program.eval(data={**self._data, "variables": values})
            if result.type() == cel.Type.ERROR:
                return None, _clean_cel_message(str(result.value()))
            return result.plain_value(), None
        except Exception as exc:  # noqa: BLE001 - any binding failure is an evaluation error
            return None, _clean_cel_message(str(exc))

    def _variable(self, name: str) -> tuple[Any, str | None]:
        if name not in self._variables:
            program = self._policy.variables[name]
            if program.error is not None:
                self._variables[name] = None, f'composited variable "{name}" fails to compile: {program.error}'
            else:
                value, error = self.evaluate(program)
                wrapped = None if error is None else f'composited variable "{name}" fails to evaluate: {error}'
                self._variables[name] = value, wrapped
        return self._variables[name]


# ---------------------------------------------------------------------------------------------- matching
def _requirement(operator: Any, key: Any, values: Any) -> Callable[[Mapping], bool]:
    values = values if isinstance(values, list) else []
    if operator in ("In", "NotIn"):
        if not values:
            raise _ConfigError(
                "values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty"
            )
        allowed = {str(v) for v in values}
        if operator == "In":
            return lambda labels: key in labels and labels[key] in allowed
        return lambda labels: key not in labels or labels[key] not in allowed
    if operator in ("Exists", "DoesNotExist"):
        if values:
            raise _ConfigError("values: Invalid value: values set must be empty for exists and does not exist")
        return (lambda labels: key in labels) if operator == "Exists" else (lambda labels: key not in labels)
    raise _ConfigError(f'"{operator}" is not a valid label selector operator')


def label_selector(selector: Any) -> Callable[[Mapping], bool] | None:
    """A metav1.LabelSelector as a predicate over labels; None selects everything."""
    if selector is None:
        return None
    if not isinstance(selector, dict):
        raise _ConfigError("Internal error occurred: invalid label selector")
    try:
        terms = [_requirement("In", str(k), [v]) for k, v in _dict(selector.get("matchLabels")).items()]
        terms += [
            _requirement(e.get("operator"), str(e.get("key", "")), e.get("values"))
            for e in map(_dict, _list(selector.get("matchExpressions")))
        ]
    except _ConfigError as exc:
        raise _ConfigError(f"Internal error occurred: {exc}") from None
    if not terms:
        return None
    return lambda labels: all(term(labels) for term in terms)


def _labels(obj: dict | None) -> dict:
    return _dict(_dict((obj or {}).get("metadata")).get("labels"))


def _exact_or_wildcard(items: Any, requested: str) -> bool:
    return any(item in ("*", requested) for item in _list(items))


def _scope_matches(scope: Any, attrs: Attributes) -> bool:
    if scope in (None, "*"):
        return True
    is_namespace = attrs.rt.plural == "namespaces"
    if scope == "Namespaced":
        return not is_namespace and attrs.namespace != ""
    if scope == "Cluster":
        return is_namespace or attrs.namespace == ""
    return False


def _resource_matches(resources: Any, attrs: Attributes) -> bool:
    for entry in _list(resources):
        resource, _, sub = str(entry).partition("/")
        if resource in ("*", attrs.rt.plural) and sub in ("*", attrs.subresource):
            return True
    return False


def _rule_matches(rule: dict, attrs: Attributes) -> bool:
    return (
        _scope_matches(rule.get("scope"), attrs)
        and _exact_or_wildcard(rule.get("operations"), attrs.operation)
        and _exact_or_wildcard(rule.get("apiGroups"), attrs.rt.group)
        and _exact_or_wildcard(rule.get("apiVersions"), attrs.rt.version)
        and _resource_matches(rule.get("resources"), attrs)
    )


def _rules_match(rules: list, attrs: Attributes) -> bool:
    for rule in map(_dict, rules):
        if _rule_matches(rule, attrs):
            names = _list(rule.get("resourceNames"))
            if not names or attrs.name in names:
                return True
    return False


# ---------------------------------------------------------------------------------------------- admission
@dataclass
class _Request:
    """The request under admission plus lazily looked-up context."""

    attrs: Attributes
    obj: dict
    old: dict | None
    store: Store
    _namespace: dict | None = None

    def namespace(self) -> dict | None:
        """The request's Namespace object, None for cluster-scoped requests (and for Namespaces themselves)."""
        if self.attrs.rt.plural == "namespaces" or not self.attrs.namespace:
            return None
        if self._namespace is None:
            so = self.store.get_stored("namespaces", None, self.attrs.namespace)
            if so is None:
                raise _ConfigError(f'namespaces "{self.attrs.namespace}" not found')
            self._namespace = so.obj
        return self._namespace

    def namespace_labels(self) -> dict:
        if self.attrs.rt.plural == "namespaces" and not self.attrs.subresource:
            return _labels(self.obj)
        namespace = self.namespace()
        return _labels(namespace)

    def matches(self, criteria: dict) -> bool:
        """matching.Matcher.Matches: selector errors count only when the rules match."""
        ns_ok, ns_error = self._try(lambda: self._namespace_selector_matches(criteria.get("namespaceSelector")))
        if not ns_ok and ns_error is None:
            return False
        obj_ok, obj_error = self._try(lambda: self._object_selector_matches(criteria.get("objectSelector")))
        if not obj_ok and obj_error is None:
            return False
        if _rules_match(_list(criteria.get("excludeResourceRules")), self.attrs):
            return False
        rules = _list(criteria.get("resourceRules"))
        if rules and not _rules_match(rules, self.attrs):
            return False
        error = ns_error or obj_error
        if error is not None:
            raise error
        return True

    @staticmethod
    def _try(check: Callable[[], bool]) -> tuple[bool, _ConfigError | None]:
        try:
            return check(), None
        except _ConfigError as exc:
            return False, exc

    def _namespace_selector_matches(self, selector: Any) -> bool:
        if not self.attrs.namespace and self.attrs.rt.plural != "namespaces":
            return True  # cluster-scoped objects are never exempted by a namespaceSelector
        predicate = label_selector(selector)
        return predicate is None or predicate(self.namespace_labels())

    def _object_selector_matches(self, selector: Any) -> bool:
        predicate = label_selector(selector)
        if predicate is None:
            return True
        return predicate(_labels(self.obj)) or (self.old is not None and predicate(_labels(self.old)))

    def activation(self, params: dict | None) -> dict[str, Any]:
        return {
            "object": self.obj,
            "oldObject": self.old,
            "params": params,
            "namespaceObject": _namespace_object(self.namespace()),
            "request": _request_doc(self.attrs),
        }


def _namespace_object(namespace: dict | None) -> dict | None:
    """cel.CreateNamespaceObject: the Namespace's spec, status and identifying metadata only."""
    if namespace is None:
        return None
    keep = (
        "name",
        "generateName",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "finalizers",
    )
    meta = _dict(namespace.get("metadata"))
    out: dict[str, Any] = {"metadata": {k: meta[k] for k in keep if k in meta}}
    for key in ("spec", "status"):
        if key in namespace:
            out[key] = namespace[key]
    return out


def _request_doc(attrs: Attributes) -> dict:
    """The admission.k8s.io/v1 AdmissionRequest as CEL's `request` sees it."""
    rt = attrs.rt
    kind = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    resource = {"group": rt.group, "version": rt.version, "resource": rt.plural}
    doc: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": kind,
        "resource": resource,
        "requestKind": dict(kind),
        "requestResource": dict(resource),
        "name": attrs.name,
        "namespace": attrs.namespace,
        "operation": attrs.operation,
        "userInfo": {"username": attrs.username, "groups": list(attrs.groups)},
        "dryRun": attrs.dry_run,
        "options": {
            "kind": "CreateOptions" if attrs.operation == "CREATE" else "UpdateOptions",
            "apiVersion": "meta.k8s.io/v1",
        },
    }
    if attrs.subresource:
        doc["subResource"] = doc["requestSubResource"] = attrs.subresource
    return doc


@dataclass(frozen=True)
class _Denial:
    policy: str
    binding: str | None
    decision: _Decision

    def message(self) -> str:
        if self.binding is None:
            return f"ValidatingAdmissionPolicy '{self.policy}' denied request: {self.decision.message}"
        return (
            f"ValidatingAdmissionPolicy '{self.policy}' with binding '{self.binding}' denied request: "
            f"{self.decision.message}"
        )


def forbidden(attrs: Attributes, obj: dict, denial: _Denial) -> ApiError:
    """admission.NewForbidden with the decision's reason and code (the validating dispatcher's denial)."""
    rt = attrs.rt
    inner = denial.message()
    name = attrs.name or str(_dict(obj.get("metadata")).get("name") or "")
    qualified = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
    message = f'{qualified} "{name}" is forbidden: {inner}' if name else f"{qualified} is forbidden: {inner}"
    reason = denial.decision.reason or "Invalid"
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    details["causes"] = [{"message": inner}]
    return ApiError(REASON_CODES.get(reason, 422), reason, message, details)


def warning_header(text: str) -> str | None:
    """The `Warning` header value the API server sends, `299 - "<text>"` with `"` and `\\` escaped; None (the
    warning is dropped) when the text has control characters such as line breaks (net.NewWarningHeader)."""
    if not text or any(unicodedata.category(c) == "Cc" for c in text):
        return None
    quoted = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{quoted}"'


class PolicyAdmission:
    """Runs the stored ValidatingAdmissionPolicies and their bindings against writes."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._cache: dict[str, tuple[int, CompiledPolicy]] = {}
        self._lock = threading.Lock()

    def admit(self, attrs: Attributes, obj: dict, old: dict | None) -> Verdict:
        """Evaluate every bound policy for one write. Never raises for a malformed policy or binding."""
        verdict = Verdict()
        if attrs.rt.group == res.ADMISSION_GROUP:
            return verdict  # policies, bindings (and webhook configurations) are exempt, as upstream
        bindings: dict[str, list[dict]] = {}
        for so in self._store.sorted_objects(BINDINGS):
            policy_name = _dict(so.obj.get("spec")).get("policyName")
            if isinstance(policy_name, str):
                bindings.setdefault(policy_name, []).append(so.obj)
        if not bindings:
            return verdict
        request = _Request(attrs, obj, old, self._store)
        denials: list[_Denial] = []
        for so in self._store.sorted_objects(POLICIES):
            name = so.key[1]
            if name in bindings:
                self._dispatch(self._compiled(so.obj, so.rv), bindings[name], request, denials, verdict.warnings)
        if denials:
            verdict.denial = forbidden(attrs, obj, denials[0])
        return verdict

    def _compiled(self, policy: dict, rv: int) -> CompiledPolicy:
        name = str(policy["metadata"]["name"])
        with self._lock:
            cached = self._cache.get(name)
            if cached is not None and cached[0] == rv:
                return cached[1]
        try:
            compiled = CompiledPolicy.compile(policy)
        except Exception as exc:  # noqa: BLE001 - a malformed policy must never break the server
            compiled = CompiledPolicy.broken(policy, exc)
        with self._lock:
            self._cache[name] = (rv, compiled)
        return compiled

    def _dispatch(
        self,
        policy: CompiledPolicy,
        bindings: list[dict],
        request: _Request,
        denials: list[_Denial],
        warnings: list[str],
    ) -> None:
        """validating.dispatcher.Dispatch for one policy and its bindings."""

        def config_error(error: str, binding: str | None) -> None:
            if policy.failure_policy == "Ignore":
                return
            if policy.failure_policy != "Fail":
                message = f"unrecognized failure policy: '{policy.failure_policy}'"
            else:
                message = f"failed to configure {'policy' if binding is None else 'binding'}: {error}"
            denials.append(_Denial(policy.name, binding, _Decision(message)))

        if policy.constraints is None:
            config_error("policy contained no match constraints, a required field", None)
            return
        try:
            if not request.matches(policy.constraints):
                return
        except _ConfigError as exc:
            config_error(str(exc), None)
            return
        if policy.config_error is not None:
            config_error(policy.config_error, None)
            return
        for binding in bindings:
            binding_name = str(binding["metadata"]["name"])
            spec = _dict(binding.get("spec"))
            try:
                if "matchResources" in spec and not request.matches(_dict(spec["matchResources"])):
                    continue
                params = self._params(policy, spec.get("paramRef"), request.attrs)
                activations = [request.activation(p) for p in params]
            except _ConfigError as exc:
                config_error(str(exc), binding_name)
                continue
            actions = [a for a in _list(spec.get("validationActions")) if isinstance(a, str)]
            for data in activations:
                for decision in policy.decisions(_Evaluation(policy, data)):
                    if "Deny" in actions:
                        denials.append(_Denial(policy.name, binding_name, decision))
                    if "Warn" in actions:
                        warnings.append(
                            f"Validation failed for ValidatingAdmissionPolicy '{policy.name}' with binding "
                            f"'{binding_name}': {decision.message}"
                        )

    def _params(self, policy: CompiledPolicy, param_ref: Any, attrs: Attributes) -> list[dict | None]:
        """generic.CollectParams: the param objects to evaluate with (a single None when there are none to use)."""
        rt = policy.param_type
        if rt is None or not isinstance(param_ref, dict):
            return [None]
        namespace = ""
        if rt.namespaced:
            namespace = str(param_ref.get("namespace") or attrs.namespace)
            if not namespace:
                raise _ConfigError(
                    "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
                )
        elif param_ref.get("namespace"):
            raise _ConfigError("paramRef.namespace must not be provided for a cluster-scoped `paramKind`")
        params = self._find_params(rt, namespace, param_ref)
        if not params and param_ref.get("parameterNotFoundAction") == "Deny":
            raise _ConfigError(PARAM_NOT_FOUND)
        return list(params)

    def _find_params(self, rt: res.ResourceType, namespace: str, param_ref: dict) -> list[dict]:
        name = param_ref.get("name")
        if name:
            if param_ref.get("selector") is not None:
                raise _ConfigError("paramRef.name and paramRef.selector are mutually exclusive")
            so = self._store.get_stored(rt.plural, namespace or None, str(name))
            return [so.obj] if so is not None else []
        if param_ref.get("selector") is None:
            raise _ConfigError("one of name or selector must be provided")
        predicate = label_selector(param_ref["selector"])
        return [
            so.obj
            for so in self._store.sorted_objects(rt.plural)
            if (not rt.namespaced or so.key[0] == namespace) and (predicate is None or predicate(_labels(so.obj)))
        ]

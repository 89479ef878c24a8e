"""Kubernetes without a cluster: the manifests of Cluster-Engines/kubernetes/ parsed and checked
against what the scripts expect (roles, replica counts, ports, commands, restart and success
policies, the container they run in), the TF_CONFIG each pod would get, computed as Kubeflow's
training-operator writes it (or, for the plain Jobs, as the pod builds it from its index), and
real processes started with exactly that TF_CONFIG, on localhost ports in place of the Services'
names; and what the scripts take from an engine: the cluster flags and TF_CONFIG, never Slurm's
variables (Cluster-Engines/slurm/slurm_task.py turns those into flags)."""
import copy
import glob
import json
import os
import re
import sys

import pytest
import yaml

import shared_helpers
from helpers import (ROOT, LocalCluster, assert_no_process_left, example, free_ports,
                     load_example, output, results_in, run_script, worker_results)

ENGINES = os.path.join(ROOT, "Cluster-Engines")
KUBERNETES = os.path.join(ENGINES, "kubernetes")
TFJOBS = sorted(glob.glob(os.path.join(KUBERNETES, "tfjob-*.yaml")))
PLAIN = sorted(glob.glob(os.path.join(KUBERNETES, "jobs-*.yaml")))
EXAMPLES = [os.path.basename(path)[len("tfjob-"):-len(".yaml")] for path in TFJOBS]
CLUSTER_FLAGS = ("--job_name", "--task_index", "--ps_hosts", "--worker_hosts")
IMAGE = "tf1-examples:latest"  # what Cluster-Engines/Dockerfile's build command tags
CHECKPOINTS = "/checkpoints"   # where every pod mounts the shared --log_dir volume
RUN_BOUND = 180                # seconds for a short run of three real processes, however busy
CHIEF_REFUSAL = "declare it as one more worker"  # what a script says to a TFJob's Chief
SLURM_VARIABLES = {"SLURM_JOB_ID": "9", "SLURM_PROCID": "0", "SLURM_STEP_NODELIST": "n1",
                   "SLURM_STEP_TASKS_PER_NODE": "3", "SLURMD_NODENAME": "n1",
                   "SLURM_LOCALID": "0"}


def documents(path):
    with open(path) as file:
        return [document for document in yaml.safe_load_all(file) if document]


def kubeflow_retryable(code):
    """The training-operator's IsRetryableExitCode (pkg/util/train), which restartPolicy
    ExitCode follows: 138 (128 + SIGUSR1) is the one code left for "retry me"."""
    if code in (1, 2, 126, 127, 128, 139):
        return False
    return code in (130, 137, 138, 143)


def tensorflow_container(pod_template):
    containers = pod_template["spec"]["containers"]
    return next(container for container in containers if container["name"] == "tensorflow")


def port_of(container):
    """The port the operator puts in TF_CONFIG: the container's port named tfjob-port."""
    return next(port["containerPort"] for port in container.get("ports", [])
                if port["name"] == "tfjob-port")


def operator_tf_configs(tfjob):
    """{(job, index): TF_CONFIG} as the training-operator writes it (genClusterSpec and
    genTFConfigJSONStr): every replica type lower-cased, each replica's Service
    <name>-<type>-<index>.<namespace>.svc at its tfjob-port, and "environment": "cloud"."""
    name = tfjob["metadata"]["name"]
    namespace = tfjob["metadata"].get("namespace", "default")
    cluster = {}
    for replica_type, spec in tfjob["spec"]["tfReplicaSpecs"].items():
        role = replica_type.lower()
        port = port_of(tensorflow_container(spec["template"]))
        cluster[role] = ["%s-%s-%d.%s.svc:%d" % (name, role, index, namespace, port)
                         for index in range(spec["replicas"])]
    return {(role, index): {"cluster": cluster, "task": {"type": role, "index": index},
                            "environment": "cloud"}
            for role, hosts in cluster.items() for index in range(len(hosts))}


def pod_environment(container, index):
    """A container's environment as the kubelet gives it to the pod of an indexed Job: the
    completion index from its annotation, and $(NAME) replaced by a variable defined above."""
    annotations = {"batch.kubernetes.io/job-completion-index": str(index)}
    environment = {}
    for variable in container.get("env", []):
        if "valueFrom" in variable:
            path = variable["valueFrom"]["fieldRef"]["fieldPath"]
            found = re.match(r"metadata\.annotations\['(.+)'\]$", path)
            environment[variable["name"]] = annotations[found.group(1)]
        else:
            environment[variable["name"]] = re.sub(
                r"\$\((\w+)\)", lambda name: environment.get(name.group(1), name.group(0)),
                variable["value"])
    return environment


def plain_tf_configs(objects):
    """{(job, index): TF_CONFIG} that each pod of the plain Jobs builds for itself."""
    configs = {}
    for job in (thing for thing in objects if thing["kind"] == "Job"):
        for index in range(job["spec"]["completions"]):
            environment = pod_environment(tensorflow_container(job["spec"]["template"]), index)
            tf_config = json.loads(environment["TF_CONFIG"])
            configs[(tf_config["task"]["type"], tf_config["task"]["index"])] = tf_config
    return configs


def commands(objects):
    """{(job, index): the container's command} of every pod."""
    found = {}
    for thing in objects:
        if thing["kind"] == "TFJob":
            for replica_type, spec in thing["spec"]["tfReplicaSpecs"].items():
                for index in range(spec["replicas"]):
                    found[(replica_type.lower(), index)] = tensorflow_container(
                        spec["template"])["command"]
        elif thing["kind"] == "Job":
            role = thing["spec"]["template"]["metadata"]["labels"]["role"]
            for index in range(thing["spec"]["completions"]):
                found[(role, index)] = tensorflow_container(thing["spec"]["template"])["command"]
    return found


def on_localhost(tf_configs, ports):
    """The same TF_CONFIGs with each task's host:port replaced by localhost and a free port."""
    cluster = next(iter(tf_configs.values()))["cluster"]
    hosts = [host for role in sorted(cluster) for host in cluster[role]]
    local = dict(zip(hosts, ("localhost:%d" % port for port in ports)))
    moved = {}
    for key, tf_config in tf_configs.items():
        moved[key] = copy.deepcopy(tf_config)
        moved[key]["cluster"] = {role: [local[host] for host in cluster_hosts]
                                 for role, cluster_hosts in tf_config["cluster"].items()}
    return moved


def flag(command, name):
    return command[command.index(name) + 1]


def with_flag(command, name, value):
    command = list(command)
    command[command.index(name) + 1] = value
    return command


@pytest.fixture(scope="module")
def scripts():
    """The template and Hogwild.py, imported (for their flag parsing)."""
    return {relative_path: load_example(relative_path)
            for relative_path in ("Distributed-Setup/dist_setup.py", "Hogwild/Hogwild.py")}


@pytest.fixture(autouse=True)
def no_engine_in_the_environment(monkeypatch):
    for name in ("TF_CONFIG", "SLURM_JOB_ID", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)


# The manifests ------------------------------------------------------------------------------

def test_there_is_a_tfjob_and_plain_jobs_for_an_asynchronous_and_a_synchronous_example():
    assert EXAMPLES == ["hogwild", "ssgd"]
    assert [os.path.basename(path) for path in PLAIN] == ["jobs-hogwild.yaml", "jobs-ssgd.yaml"]


@pytest.mark.parametrize("path", TFJOBS + PLAIN, ids=os.path.basename)
def test_every_pod_runs_an_example_of_the_image_on_the_shared_volume(path):
    claim = documents(os.path.join(KUBERNETES, "checkpoints.yaml"))[0]
    assert claim["kind"] == "PersistentVolumeClaim"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    dockerfile = open(os.path.join(ENGINES, "Dockerfile")).read()
    assert "-t %s ." % IMAGE in dockerfile and "WORKDIR /examples" in dockerfile
    assert "USER 1000" in dockerfile and "pip install -r requirements/tf1.txt" in dockerfile
    assert re.search(r"^FROM python:3\.7[.\d]*-slim", dockerfile, re.MULTILINE)
    ignored = open(os.path.join(ENGINES, "Dockerfile.dockerignore")).read().split()
    objects = documents(path)
    templates = [spec["template"] for thing in objects if thing["kind"] == "TFJob"
                 for spec in thing["spec"]["tfReplicaSpecs"].values()]
    templates += [thing["spec"]["template"] for thing in objects if thing["kind"] == "Job"]
    assert templates
    for template in templates:
        container = tensorflow_container(template)
        assert container["image"] == IMAGE and "workingDir" not in container  # /examples
        command = container["command"]
        assert command[0] == "python" and os.path.isfile(example(command[1])), command
        assert command[1].split("/")[0] not in ignored
        assert not set(command) & set(CLUSTER_FLAGS), "the cluster comes from TF_CONFIG"
        assert flag(command, "--log_dir").startswith(CHECKPOINTS + "/")
        assert float(flag(command, "--timeout")) >= 120, "pods start minutes apart"
        assert container["volumeMounts"] == [{"name": "checkpoints", "mountPath": CHECKPOINTS}]
        assert template["spec"]["volumes"] == [{
            "name": "checkpoints",
            "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}]
        assert template["spec"]["securityContext"] == {"fsGroup": 1000}  # the image's user
    assert len({tuple(command) for command in commands(objects).values()}) == 1


@pytest.mark.parametrize("path", TFJOBS, ids=os.path.basename)
def test_a_tfjob_is_what_the_operator_and_the_scripts_expect(path):
    (tfjob,) = documents(path)
    assert (tfjob["apiVersion"], tfjob["kind"]) == ("kubeflow.org/v1", "TFJob")
    replicas = tfjob["spec"]["tfReplicaSpecs"]
    # No Chief, Master or Evaluator: worker 0 is the chief, and the scripts refuse the others.
    assert sorted(replicas) == ["PS", "Worker"]
    assert replicas["PS"]["replicas"] >= 1 and replicas["Worker"]["replicas"] >= 2
    for spec in replicas.values():
        assert spec["restartPolicy"] == "ExitCode"
        assert port_of(tensorflow_container(spec["template"])) == 2222
    # The default success policy (""): the job has succeeded when worker 0 has.
    assert tfjob["spec"].get("successPolicy", "") == ""
    assert tfjob["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    assert not tfjob["spec"].get("enableDynamicWorker")  # its sparseCluster is refused
    configs = operator_tf_configs(tfjob)
    name = tfjob["metadata"]["name"]
    assert configs[("worker", 1)] == {
        "cluster": {"ps": ["%s-ps-0.default.svc:2222" % name],
                    "worker": ["%s-worker-0.default.svc:2222" % name,
                               "%s-worker-1.default.svc:2222" % name]},
        "task": {"type": "worker", "index": 1}, "environment": "cloud"}


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_plain_jobs_are_the_tfjob_without_an_operator(name):
    objects = documents(os.path.join(KUBERNETES, "jobs-%s.yaml" % name))
    (tfjob,) = documents(os.path.join(KUBERNETES, "tfjob-%s.yaml" % name))
    (service,) = [thing for thing in objects if thing["kind"] == "Service"]
    jobs = [thing for thing in objects if thing["kind"] == "Job"]
    assert service["spec"]["clusterIP"] == "None"  # headless: one DNS name per pod
    assert [port["port"] for port in service["spec"]["ports"]] == [2222]
    for job in jobs:
        spec, template = job["spec"], job["spec"]["template"]
        assert spec["completionMode"] == "Indexed"
        assert spec["completions"] == spec["parallelism"]
        assert template["spec"]["subdomain"] == service["metadata"]["name"]
        assert template["spec"]["restartPolicy"] == "Never"  # podFailurePolicy needs it
        labels = template["metadata"]["labels"]
        assert all(labels[key] == value for key, value in service["spec"]["selector"].items())
        assert port_of(tensorflow_container(template)) == 2222
        assert "successPolicy" not in spec  # every worker ends by itself; see the manifest
        rules = spec["podFailurePolicy"]["rules"]
        (exit_rule,) = [rule for rule in rules if "onExitCodes" in rule]
        assert (exit_rule["action"], exit_rule["onExitCodes"]["operator"],
                exit_rule["onExitCodes"]["containerName"]) == ("FailJob", "NotIn", "tensorflow")
        retried = set(exit_rule["onExitCodes"]["values"])
        assert retried == {code for code in range(1, 256) if kubeflow_retryable(code)}
        assert {"action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]} in rules
    plain, operator = plain_tf_configs(objects), operator_tf_configs(tfjob)
    assert sorted(plain) == sorted(operator)
    for (role, index), tf_config in plain.items():
        assert tf_config["task"] == operator[(role, index)]["task"]
        for job_name, hosts in tf_config["cluster"].items():
            assert hosts == ["%s-%s-%d.%s:2222" % (name, job_name, i, service["metadata"]["name"])
                             for i in range(len(operator[(role, index)]["cluster"][job_name]))]
    assert commands(objects) == commands([tfjob])


# Strict schemas: Kubernetes' own, and the TFJob CRD's ---------------------------------------

KUBERNETES_VERSIONS = ("1.31", "1.34")
MANIFESTS = sorted(glob.glob(os.path.join(KUBERNETES, "*.yaml")))
# The openAPIV3Schema of the training-operator's TFJob CRD (its source and what is left out of it
# are in the file's header).
TFJOB_SCHEMA = os.path.join(ROOT, "tests", "schemas", "tfjob-v1-openapiv3.yaml")


def kubernetes_validate():
    return pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate (requirements/test.txt) holds the "
        "schemas of Kubernetes 1.31 and 1.34 only in versions that need Python >= 3.8: it runs "
        "in the TensorFlow 2.x run (bash setup.sh --tf2 test -m tf2)")


def strictly(schema, types):
    """The CRD's schema as the API server applies it with kubectl's default strict field
    validation (a field that no schema declares is an error, not dropped), and the part the
    file leaves out (x-vendored-as) a reference to that Kubernetes type in `types`."""
    if isinstance(schema, dict):
        schema = {key: strictly(value, types) for key, value in schema.items()}
        if "x-vendored-as" in schema:
            return {"$ref": types + schema["x-vendored-as"]}
        if "properties" in schema and "additionalProperties" not in schema and \
                not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [strictly(item, types) for item in schema]
    return schema


def tfjob_validator(version):
    """A validator for a TFJob on Kubernetes `version`: the CRD's schema, its pod spec and the
    object's metadata checked against that version's strict PodSpec and ObjectMeta."""
    utils = kubernetes_validate().utils
    import jsonschema
    import referencing
    (full_version,) = {each for each in utils.all_versions()  # each twice: strict and not
                       if utils.major_minor(each) == version}
    definitions = utils.schema_contents(
        "kubernetes-json-schema/v%s-local-strict/_definitions.json" % full_version, version)
    types = definitions["$id"] + "#/$defs/"
    with open(TFJOB_SCHEMA) as file:
        schema = strictly(yaml.safe_load(file)["openAPIV3Schema"], types)
    schema["properties"]["metadata"] = {
        "$ref": types + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    registry = referencing.Resource.from_contents(definitions) @ referencing.Registry()
    return jsonschema.Draft202012Validator(schema, registry=registry)


def schema_errors(document, version):
    """What a strict validation against Kubernetes `version` finds wrong, one line each."""
    if document["kind"] == "TFJob":
        return ["%s: %s" % (".".join(map(str, error.path)), error.message)
                for error in tfjob_validator(version).iter_errors(document)]
    validate = kubernetes_validate()
    try:
        validate.validate(document, version, strict=True)
    except validate.ValidationError as error:
        return ["%s: %s" % (".".join(map(str, error.path)), error.message)]
    return []


@pytest.mark.tf2
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=os.path.basename)
def test_every_manifest_is_valid_for_two_kubernetes_versions_strictly(path, version):
    """Every object of every manifest, with kubernetes-validate's strict schemas (no field that
    the version does not know, every required one): Jobs, Services and the claim against
    Kubernetes' own, the TFJobs against the training-operator's CRD."""
    kinds = [document["kind"] for document in documents(path)]
    assert kinds and set(kinds) <= {"Job", "Service", "PersistentVolumeClaim", "TFJob"}
    for document in documents(path):
        assert schema_errors(document, version) == [], (document["kind"],
                                                         document["metadata"]["name"])


@pytest.mark.tf2
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_strict_validation_finds_what_is_wrong(version):
    """The validation above is no rubber stamp: a podFailurePolicy condition without its status
    (what the plain Jobs lacked), a misspelt field of a Job, of a TFJob's own spec, of its
    replica and of the pod inside it are each found."""
    job = next(thing for thing in documents(PLAIN[0]) if thing["kind"] == "Job")
    (tfjob,) = documents(TFJOBS[0])
    broken = copy.deepcopy(job)
    del broken["spec"]["podFailurePolicy"]["rules"][1]["onPodConditions"][0]["status"]
    assert "'status' is a required property" in " ".join(schema_errors(broken, version))
    broken = copy.deepcopy(job)
    broken["spec"]["completionsMode"] = "Indexed"
    assert "completionsMode" in " ".join(schema_errors(broken, version))
    for where in (lambda doc: doc["spec"], lambda doc: doc["spec"]["tfReplicaSpecs"]["Worker"],
                  lambda doc: doc["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"],
                  lambda doc: tensorflow_container(
                      doc["spec"]["tfReplicaSpecs"]["Worker"]["template"])):
        broken = copy.deepcopy(tfjob)
        where(broken)["restartPolicyy"] = "ExitCode"
        assert "restartPolicyy" in " ".join(schema_errors(broken, version))
    assert schema_errors(tfjob, version) == []


# Real processes with the TF_CONFIG of every pod ----------------------------------------------

@pytest.mark.parametrize("name", EXAMPLES)
def test_the_pods_train_with_the_tf_config_they_get(name, tmp_path):
    """Every pod of the TFJob (the plain Jobs give the same TF_CONFIG, above) as a real process
    with only its TF_CONFIG and the manifest's command (a shorter --train_steps, --log_dir in a
    temporary directory): all train and exit 0, and worker 0, whose success is the job's, ends
    with the training done."""
    (tfjob,) = documents(os.path.join(KUBERNETES, "tfjob-%s.yaml" % name))
    configs = on_localhost(operator_tf_configs(tfjob), free_ports(3))
    command = commands([tfjob])[("worker", 0)]
    command = with_flag(with_flag(command, "--train_steps", "300"), "--log_dir",
                        str(tmp_path / "log"))
    script = example(command[1])
    cluster = LocalCluster(script, workers=2, ps=1, echo=False)
    try:
        for task in cluster.tasks:
            cluster.start_task(task, [sys.executable, script] + command[2:],
                               env={"TF_CONFIG": json.dumps(configs[(task.job, task.index)])})
        assert cluster.wait(RUN_BOUND), (cluster.returncodes(), output(cluster))
    finally:
        cluster.stop()
    assert_no_process_left(cluster)
    assert set(cluster.returncodes().values()) == {0}, (cluster.returncodes(), output(cluster))
    chief = worker_results(cluster)[0]
    assert chief["global_step"] >= 300 and chief["test_accuracy"] > 0.8, output(cluster)


def test_exit_codes_are_what_the_restart_policies_expect(scripts):
    """138 (a peer was lost) is retried by TFJob's ExitCode policy and the plain Jobs'
    podFailurePolicy; 2 (bad input) and 1 (a permanent error) are not. A real worker whose ps
    never comes up ends with 138, naming it."""
    for module in scripts.values():
        assert module.RETRYABLE_EXIT_CODE == 138
    assert kubeflow_retryable(138) and not kubeflow_retryable(2) and not kubeflow_retryable(1)
    ps, worker = free_ports(2)
    tf_config = {"cluster": {"ps": ["localhost:%d" % ps], "worker": ["localhost:%d" % worker]},
                 "task": {"type": "worker", "index": 0}, "environment": "cloud"}
    code, text = run_script([sys.executable, example("Hogwild/Hogwild.py"), "--timeout", "3"],
                            env={"TF_CONFIG": json.dumps(tf_config)}, timeout=RUN_BOUND)
    assert code == 138 and "never came up" in text, (code, text)
    assert not results_in(text)


# Roles of the operator that the scripts do not use -------------------------------------------

def with_replica(replica_type):
    """The Hogwild TFJob with one more replica of this type."""
    (tfjob,) = documents(os.path.join(KUBERNETES, "tfjob-hogwild.yaml"))
    replicas = tfjob["spec"]["tfReplicaSpecs"]
    replicas[replica_type] = dict(copy.deepcopy(replicas["Worker"]), replicas=1)
    return tfjob


REFUSED = {
    "a Chief replica": (with_replica("Chief"), CHIEF_REFUSAL),
    "a Master replica": (with_replica("Master"), "no Master replica"),
    "an Evaluator replica": (with_replica("Evaluator"), "drop the TFJob's Evaluator replica"),
}


def refusal(module, tf_config, capsys, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", tf_config)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        module.parse_flags([])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(error.strip().splitlines()) == 1, error
    return error


@pytest.mark.parametrize("layout", sorted(REFUSED))
@pytest.mark.parametrize("which", ["Distributed-Setup/dist_setup.py", "Hogwild/Hogwild.py"])
def test_every_pod_of_a_layout_with_a_role_not_used_here_says_what_to_declare(
        layout, which, scripts, capsys, monkeypatch):
    """Each pod of such a TFJob exits 2 (the ExitCode policy does not retry it) with one line
    that says what to declare instead; an evaluator that the operator leaves out of the cluster
    (older operators did) is refused too."""
    module = scripts[which]
    tfjob, expected = REFUSED[layout]
    configs = list(operator_tf_configs(tfjob).values())
    evaluator = [config for config in configs if config["task"]["type"] == "evaluator"]
    configs += [dict(config, cluster={role: hosts for role, hosts in config["cluster"].items()
                                      if role != "evaluator"}) for config in evaluator]
    for tf_config in on_localhost({i: config for i, config in enumerate(configs)},
                                  free_ports(4)).values():
        assert expected in refusal(module, json.dumps(tf_config), capsys, monkeypatch)


def test_the_operators_sparse_cluster_is_refused(scripts, capsys, monkeypatch):
    sparse = {"sparseCluster": {"ps": ["h-ps-0.default.svc:2222"],
                                "worker": {"1": "h-worker-1.default.svc:2222"}},
              "task": {"type": "worker", "index": 1}}
    assert "leave enableDynamicWorker off" in refusal(
        scripts["Hogwild/Hogwild.py"], json.dumps(sparse), capsys, monkeypatch)


# What the scripts take from an engine --------------------------------------------------------

def test_no_example_reads_slurms_variables():
    """Engine glue lives with the engine: under Slurm, slurm_task.py hands every task its
    cluster flags, so no script carries Slurm's parsing (host lists, tasks per node)."""
    readers = [os.path.relpath(path, ROOT) for path in shared_helpers.example_scripts()
               if "SLURM_" in open(path).read()]
    assert readers == []


def test_flags_win_over_tf_config_and_slurms_variables_change_nothing(scripts, monkeypatch):
    module = scripts["Distributed-Setup/dist_setup.py"]
    ps, worker0, worker1 = ("localhost:%d" % port for port in free_ports(3))
    flags = ["--ps_hosts", ps, "--worker_hosts", "%s,%s" % (worker0, worker1)]
    for variable, value in SLURM_VARIABLES.items():
        monkeypatch.setenv(variable, value)
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"ps": [ps], "worker": [worker0, worker1]},
        "task": {"type": "worker", "index": 1}, "environment": "cloud"}))
    args = module.parse_flags(["--job_name", "ps", "--task_index", "0"] + flags)
    assert (args.job_name, args.task_index) == ("ps", 0)
    args = module.parse_flags([])
    assert (args.cluster, args.job_name, args.task_index) == (
        {"ps": [ps], "worker": [worker0, worker1]}, "worker", 1)
    monkeypatch.delenv("TF_CONFIG")
    under_slurm = outcome(module)
    for variable in SLURM_VARIABLES:
        monkeypatch.delenv(variable)
    assert under_slurm == outcome(module)


def outcome(module):
    """What parse_flags makes of no flags at all: (cluster, job, index), or the exit code of its
    refusal (the defaults' ports may be taken on this machine: then both answers are that)."""
    try:
        args = module.parse_flags([])
    except SystemExit as exit_info:
        return exit_info.code
    return args.cluster, args.job_name, args.task_index

"""The conformance table: one entry for every field of every dataclass of ``wire.spec``
(what each entry means: ``wire.conformance``)."""

from __future__ import annotations

from fennel_dagster.wire.conformance import Consumed, Entry, Executor, Refused, Structural

# -- where things are read
PIPE = "fennel_dagster/ops/pipeline.py::PipelineExecutor"
APPLY = f"{PIPE}.apply_node"
SPARK_APPLY = "fennel_dagster/batch/pipeline.py::SparkPipeline._apply"
SPARK_KEYED = "fennel_dagster/batch/pipeline.py::SparkPipeline._keyed"
SPARK_PANDAS = "fennel_dagster/batch/pipeline.py::SparkPipeline._in_pandas"
SPARK_ARROW = "fennel_dagster/batch/pipeline.py::SparkPipeline._assign_in_arrow"
AGG_VALUES = "fennel_dagster/ops/aggregate/values.py::aggregate_values"
WINDOWED = "fennel_dagster/ops/aggregate/windowed.py"
SCHEMA_CHECK = "fennel_dagster/ops/schema.py::_check"
SPARK_TYPE = "fennel_dagster/batch/expr.py::spark_type"
EXPR = "fennel_dagster/ops/expr.py::compile_expr"
SPARK_EXPR = "fennel_dagster/batch/expr.py::to_column"
USERCODE = "fennel_dagster/wire/usercode.py"
QUERY = "fennel_dagster/query/execute.py"
SPARK_QUERY = "fennel_dagster/batch/offline_query.py"
SPARK_EXTRACTORS = "fennel_dagster/batch/extractors.py"
SOURCE_RULES = "fennel_dagster/ops/source_rules.py"
SOURCE_JOB = "fennel_dagster/engine/jobs/source.py"
SELECT_ENV = "fennel_dagster/commit/environment.py::select_env"
COMPILER = "fennel_dagster/commit/compiler.py"
VALIDATE = "fennel_dagster/commit/validate.py"
S3_SINK_RULE = "fennel_dagster/commit/executable.py::_s3_sink"
SINK_RULES = "fennel_dagster/commit/executable.py::sinks"

# -- proofs
P_STATEFUL = "tests/batch/test_stateful_parity.py"
P_ENGINE = "tests/engine/test_engine_parity.py"
P_FILTER = f"{P_ENGINE}::test_filter_assign_and_user_code_on_engine_spark_and_mock"
P_STATELESS = (
    "tests/batch/test_pipeline_parity.py::test_stateless_pipeline_on_spark_equals_the_engine"
)
P_EXPR = "tests/batch/test_expr_parity.py::test_spark_computes_what_pandas_computes"
P_KINDS = "tests/ops/test_aggregate.py::test_every_aggregation_kind"
P_TYPES = "tests/declare/test_datasets.py::test_fields_keys_timestamp_and_every_type_map_to_the_ir"
P_BAD_ROWS = (
    "tests/mock/test_mock_client.py::"
    "test_rows_that_break_the_schema_are_rejected_with_the_field_and_value"
)
P_QUERY = (
    "tests/mock/test_mock_client.py::test_query_runs_lookup_expression_alias_and_python_extractors"
)
P_SPARK_QUERY = "tests/batch/test_offline_query.py::test_spark_query_offline_equals_the_mock"
P_ENV = "tests/commit/test_plan.py::test_env_selects_the_same_sources_in_the_server_and_the_mock"

# -- why an executor has nothing to do with a field
LOGGED: tuple[Executor, str] = (
    "mock",
    "rows are logged to the mock directly: it reads no connector and polls nothing",
)
NO_SINK: tuple[Executor, str] = (
    "mock",
    "the mock, like Fennel's, writes no sink (it accepts every sink and writes nothing)",
)
SPARK_NO_SINK: tuple[Executor, str] = ("spark", "sinks are engine jobs; Spark writes none")
SPARK_SELECTED: tuple[Executor, str] = (
    "spark",
    "env selection happens at commit, before any executor sees the commit",
)
SPARK_INGESTED: tuple[Executor, str] = (
    "spark",
    "Spark reads rows the engine ingested: the source job already applied this",
)
SPARK_CHECKED: tuple[Executor, str] = (
    "spark",
    "Spark reads rows the mock/engine already checked against this type at ingest",
)
SPARK_COMMIT: tuple[Executor, str] = (
    "spark",
    "a commit rule: Spark runs only what a valid commit declares",
)
SPARK_NO_EXPECT: tuple[Executor, str] = (
    "spark",
    "expectations run on the dataset's stream, by the platform",
)
MOCK_NO_EXPECT: tuple[Executor, str] = (
    "mock",
    "the mock, like Fennel's, does not run great-expectations",
)
MOCK_ONE_STORE: tuple[Executor, str] = (
    "mock",
    "the mock keeps a test's rows in one store that serves lookups and offline queries",
)
SPARK_VIA_KEYED: tuple[Executor, str] = ("spark", SPARK_KEYED)
SPARK_VIA_PANDAS: tuple[Executor, str] = ("spark", SPARK_PANDAS)
SPARK_VIA_QUERY: tuple[Executor, str] = ("spark", "fennel_dagster/batch/extractors.py::run_python")

EDGE = Structural("an operator's id or input edge: every executor walks the DAG by it")
NAME = Structural("the entity's name: its identity in every executor")
DOC = Structural("documentation: kept and shown (get_datasets, GraphQL), no behaviour")


def _agg(*readers: str, proof: str = P_KINDS) -> Consumed:
    return Consumed(readers, proof, via=(SPARK_VIA_KEYED,))


def _node(*readers: str, proof: str = P_STATELESS) -> Consumed:
    return Consumed(readers, proof)


def _typed(*readers: str, proof: str = P_BAD_ROWS, spark: bool = True) -> Consumed:
    return Consumed(readers, proof, moot=() if spark else (SPARK_CHECKED,))


def _sink(*readers: str, proof: str) -> Consumed:
    return Consumed(readers, proof, moot=(NO_SINK, SPARK_NO_SINK))


TABLE: dict[str, Entry] = {
    # ---------------------------------------------------------------- types
    "DecimalType.scale": _typed(
        "fennel_dagster/ops/rows.py::typed_series",
        SPARK_TYPE,
        proof="tests/compat/test_client_tests_api.py::"
        "test_decimal_amounts_aggregate_to_decimals_at_their_scale",
    ),
    "OptionalType.of": _typed(SCHEMA_CHECK, SPARK_TYPE),
    "ListType.of": _typed(SCHEMA_CHECK, SPARK_TYPE),
    "MapType.of": _typed(SCHEMA_CHECK, SPARK_TYPE),
    "EmbeddingType.dim": _typed(SCHEMA_CHECK, spark=False),
    "StructField.name": _typed(SCHEMA_CHECK, SPARK_TYPE),
    "StructField.dtype": _typed(SCHEMA_CHECK, SPARK_TYPE),
    "StructType.name": Structural("the struct's class name: how values are shown, not checked"),
    "StructType.fields": _typed(SCHEMA_CHECK, SPARK_TYPE),
    "BetweenType.of": _typed(SCHEMA_CHECK, SPARK_TYPE),
    "BetweenType.min": _typed(SCHEMA_CHECK, spark=False),
    "BetweenType.max": _typed(SCHEMA_CHECK, spark=False),
    "BetweenType.strict_min": _typed(SCHEMA_CHECK, spark=False),
    "BetweenType.strict_max": _typed(SCHEMA_CHECK, spark=False),
    "OneOfType.of": _typed(SCHEMA_CHECK, SPARK_TYPE),
    "OneOfType.options": _typed(SCHEMA_CHECK, spark=False),
    "RegexType.pattern": _typed(SCHEMA_CHECK, spark=False),
    # ---------------------------------------------------------------- expressions
    "Col.name": Consumed((EXPR, SPARK_EXPR), P_EXPR),
    "Lit.value": Consumed(("fennel_dagster/ops/expr.py", "fennel_dagster/batch/expr.py"), P_EXPR),
    "Lit.dtype": Consumed((EXPR, SPARK_EXPR), P_EXPR),
    "Call.fn": Consumed((EXPR, SPARK_EXPR), P_EXPR),
    "Call.args": Consumed((EXPR, SPARK_EXPR), P_EXPR),
    "Call.dtype": Consumed(("fennel_dagster/ops/expr.py", "fennel_dagster/batch/expr.py"), P_EXPR),
    "Var.name": Consumed((EXPR, SPARK_EXPR), P_EXPR),
    "When.cases": Consumed((EXPR, SPARK_EXPR), P_EXPR),
    "When.otherwise": Consumed((EXPR, SPARK_EXPR), P_EXPR),
    # ---------------------------------------------------------------- user code
    "UserCode.source": Consumed(
        (USERCODE,),
        "tests/declare/test_usercode.py::"
        "test_function_source_is_canonical_and_loads_with_its_helpers",
    ),
    "UserCode.entrypoint": Consumed(
        (USERCODE,), "tests/declare/test_usercode.py::test_two_lambdas_on_one_line_are_told_apart"
    ),
    "UserCode.preamble": Consumed(
        (USERCODE,),
        "tests/declare/test_usercode.py::"
        "test_captured_code_runs_in_a_fresh_interpreter_without_the_repo_module",
    ),
    # ---------------------------------------------------------------- schemas
    "FieldSpec.name": NAME,
    "FieldSpec.dtype": _typed(
        "fennel_dagster/ops/schema.py::check_rows", "fennel_dagster/batch/pipeline.py::spark_schema"
    ),
    "FieldSpec.key": Consumed(
        (f"{PIPE}._join", "fennel_dagster/batch/asof.py::asof_join"),
        "tests/mock/test_mock_client.py::test_upserts_replace_earlier_rows_as_of_their_time",
    ),
    "FieldSpec.timestamp": Consumed(
        ("fennel_dagster/ops/index.py::upsert", "fennel_dagster/batch/asof.py::asof_join"),
        "tests/mock/test_mock_client.py::test_offline_query_is_point_in_time_per_row",
    ),
    "FieldSpec.description": DOC,
    "MetaSpec.owner": Consumed(
        (f"{VALIDATE}::owners",),
        "tests/commit/test_validation.py::test_owner_is_required",
        moot=(SPARK_COMMIT,),
    ),
    "MetaSpec.description": DOC,
    "MetaSpec.tags": DOC,
    "MetaSpec.deleted": Consumed(
        (f"{VALIDATE}::deletions", f"{COMPILER}::compile_blueprints"),
        "tests/commit/test_validation.py::test_deletion_takes_two_commits",
        moot=(SPARK_COMMIT,),
    ),
    # ---------------------------------------------------------------- windows & aggregations
    "WindowSpec.kind": _agg(
        WINDOWED,
        "fennel_dagster/batch/native.py",
        proof=f"{P_ENGINE}::test_aggregate_hopping_window_on_engine_spark_and_mock",
    ),
    "WindowSpec.duration": _agg(
        f"{WINDOWED}::_windows",
        "fennel_dagster/batch/native.py::continuous",
        proof=f"{P_ENGINE}::test_aggregate_tumbling_window_on_engine_spark_and_mock",
    ),
    "WindowSpec.stride": _agg(
        f"{WINDOWED}::_windows",
        proof=f"{P_ENGINE}::test_aggregate_hopping_window_on_engine_spark_and_mock",
    ),
    "WindowSpec.gap": _agg(
        f"{WINDOWED}::_session_reach",
        proof=f"{P_ENGINE}::test_aggregate_session_window_on_engine_spark_and_mock",
    ),
    "WindowSpec.lookback": _agg(
        f"{WINDOWED}::_lookback",
        "fennel_dagster/batch/native.py::_in_jvm",
        proof=f"{P_ENGINE}::test_aggregate_windows_with_a_lookback_on_engine_spark_and_mock",
    ),
    "AggSpec.kind": _agg(AGG_VALUES, "fennel_dagster/batch/native.py"),
    "AggSpec.into": _agg(f"{WINDOWED}::_row", "fennel_dagster/batch/native.py::continuous"),
    "AggSpec.window": _agg(f"{WINDOWED}::run_windowed", "fennel_dagster/batch/native.py::_in_jvm"),
    "AggSpec.of": _agg("fennel_dagster/ops/aggregate/layout.py", "fennel_dagster/batch/native.py"),
    "AggSpec.unique": _agg(AGG_VALUES, "fennel_dagster/batch/native.py::_in_jvm"),
    "AggSpec.approx": Structural(
        "a permission to approximate (count unique, quantile): every executor answers exactly "
        "(ops/aggregate/__init__.py), which any approximation admits"
    ),
    "AggSpec.limit": _agg(AGG_VALUES),
    "AggSpec.decimal_scale": _agg(
        AGG_VALUES, proof="tests/batch/test_stateful_parity.py::test_aggregate_of_decimals"
    ),
    "AggSpec.dedup": _agg(AGG_VALUES),
    "AggSpec.dropnull": _agg(AGG_VALUES, "fennel_dagster/batch/native.py::_agg"),
    "AggSpec.default": _agg(
        "fennel_dagster/ops/aggregate/values.py::finish",
        "fennel_dagster/query/lookup.py::aggregate_defaults",
        proof="tests/compat/test_client_tests_api.py::test_a_key_without_a_row_answers_the_aggregations_defaults_and_keys_are_cast",
    ),
    "AggSpec.p": _agg(AGG_VALUES),
    "AggSpec.half_life": _agg(
        AGG_VALUES,
        proof="tests/compat/test_declarations.py::test_exp_decay_sum_gives_the_same_rows_on_spark_as_on_the_engine",
    ),
    # ---------------------------------------------------------------- operators
    "InputNode.id": EDGE,
    "InputNode.dataset": EDGE,
    "FilterNode.id": EDGE,
    "FilterNode.input": EDGE,
    "FilterNode.predicate": _node(APPLY, SPARK_APPLY, proof=P_FILTER),
    "FilterNode.code": Consumed((APPLY,), P_FILTER, via=(SPARK_VIA_PANDAS,)),
    "AssignColumn.name": _node(APPLY, SPARK_APPLY, proof=P_FILTER),
    "AssignColumn.dtype": _node(
        APPLY,
        SPARK_APPLY,
        proof="tests/compat/test_fennel_api.py::test_astype_declares_an_assigned_columns_type_and_does_not_convert",
    ),
    "AssignColumn.expr": _node(APPLY, SPARK_APPLY, proof=P_FILTER),
    "AssignColumn.code": Consumed((APPLY,), P_FILTER, via=(("spark", SPARK_ARROW),)),
    "AssignNode.id": EDGE,
    "AssignNode.input": EDGE,
    "AssignNode.columns": _node(APPLY, SPARK_APPLY, proof=P_FILTER),
    "TransformNode.id": EDGE,
    "TransformNode.input": EDGE,
    "TransformNode.code": Consumed((APPLY,), P_FILTER, via=(SPARK_VIA_PANDAS,)),
    "TransformNode.schema": Consumed((APPLY,), P_FILTER, via=(SPARK_VIA_PANDAS,)),
    "JoinNode.id": EDGE,
    "JoinNode.input": EDGE,
    "JoinNode.right": _node(
        f"{PIPE}._join",
        "fennel_dagster/batch/asof.py::asof_join",
        proof=f"{P_ENGINE}::test_join_on_engine_spark_and_mock",
    ),
    "JoinNode.how": _node(
        f"{PIPE}._join",
        "fennel_dagster/batch/asof.py::asof_join",
        proof=f"{P_ENGINE}::test_join_on_engine_spark_and_mock",
    ),
    "JoinNode.left_on": _node(
        f"{PIPE}._join",
        "fennel_dagster/batch/asof.py::asof_join",
        proof=f"{P_ENGINE}::test_join_on_engine_spark_and_mock",
    ),
    "JoinNode.right_on": _node(
        f"{PIPE}._join",
        "fennel_dagster/batch/asof.py::asof_join",
        proof=f"{P_ENGINE}::test_join_on_engine_spark_and_mock",
    ),
    "JoinNode.within_before": _node(
        f"{PIPE}._join", "fennel_dagster/batch/asof.py::asof_join", proof=f"{P_STATEFUL}::test_join"
    ),
    "JoinNode.within_after": _node(
        f"{PIPE}._join",
        "fennel_dagster/batch/asof.py::asof_join",
        proof=f"{P_ENGINE}::test_join_within_before_and_after_on_engine_spark_and_mock",
    ),
    "JoinNode.fields": _node(
        f"{PIPE}._join",
        "fennel_dagster/batch/asof.py::asof_join",
        proof=f"{P_ENGINE}::test_join_on_engine_spark_and_mock",
    ),
    "AggregateNode.id": EDGE,
    "AggregateNode.input": EDGE,
    "AggregateNode.keys": _agg(
        APPLY,
        "fennel_dagster/batch/pipeline.py::SparkPipeline._partition_keys",
        proof=f"{P_ENGINE}::test_aggregate_continuous_window_on_engine_spark_and_mock",
    ),
    "AggregateNode.aggs": _agg(
        APPLY,
        "fennel_dagster/batch/native.py::continuous",
        proof=f"{P_ENGINE}::test_aggregate_continuous_window_on_engine_spark_and_mock",
    ),
    "AggregateNode.emit": _agg(
        f"{WINDOWED}::_grows",
        proof=f"{P_ENGINE}::test_sessions_as_they_grow_on_engine_spark_and_mock",
    ),
    "AggregateNode.along": _agg(
        APPLY, SPARK_APPLY, proof=f"{P_STATEFUL}::test_aggregate_along_another_time_column"
    ),
    "AggregateNode.window": _agg(
        f"{WINDOWED}::run_windowed",
        SPARK_KEYED,
        proof=f"{P_ENGINE}::test_aggregate_by_hopping_window_key_on_engine_spark_and_mock",
    ),
    "FirstNode.id": EDGE,
    "FirstNode.input": EDGE,
    "FirstNode.keys": _agg(
        APPLY,
        "fennel_dagster/batch/pipeline.py::SparkPipeline._partition_keys",
        proof=f"{P_ENGINE}::test_first_on_engine_spark_and_mock",
    ),
    "LatestNode.id": EDGE,
    "LatestNode.input": EDGE,
    "LatestNode.keys": _agg(
        APPLY,
        "fennel_dagster/batch/pipeline.py::SparkPipeline._partition_keys",
        proof=f"{P_ENGINE}::test_latest_on_engine_spark_and_mock",
    ),
    "DedupNode.id": EDGE,
    "DedupNode.input": EDGE,
    "DedupNode.by": _agg(
        f"{PIPE}._dedup",
        "fennel_dagster/batch/pipeline.py::SparkPipeline._partition_keys",
        proof=f"{P_ENGINE}::test_dedup_on_engine_spark_and_mock",
    ),
    "DedupNode.window": _agg(
        f"{PIPE}._dedup",
        SPARK_KEYED,
        proof=f"{P_ENGINE}::test_dedup_in_a_tumbling_window_on_engine_spark_and_mock",
    ),
    "ExplodeNode.id": EDGE,
    "ExplodeNode.input": EDGE,
    "ExplodeNode.columns": _node(APPLY, SPARK_APPLY),
    "DropNode.id": EDGE,
    "DropNode.input": EDGE,
    "DropNode.columns": _node(APPLY, SPARK_APPLY),
    "DropNullNode.id": EDGE,
    "DropNullNode.input": EDGE,
    "DropNullNode.columns": _node(APPLY, SPARK_APPLY),
    "SelectNode.id": EDGE,
    "SelectNode.input": EDGE,
    "SelectNode.columns": _node(APPLY, SPARK_APPLY),
    "RenameNode.id": EDGE,
    "RenameNode.input": EDGE,
    "RenameNode.mapping": _node(APPLY, SPARK_APPLY),
    "UnionNode.id": EDGE,
    "UnionNode.inputs": EDGE,
    "ChangelogNode.id": EDGE,
    "ChangelogNode.input": EDGE,
    "ChangelogNode.delete_column": _agg(APPLY, proof=f"{P_STATEFUL}::test_changelog"),
    "PipelineSpec.name": NAME,
    "PipelineSpec.dataset": EDGE,
    "PipelineSpec.inputs": EDGE,
    "PipelineSpec.nodes": Structural("the operator DAG itself: every executor runs its nodes"),
    "PipelineSpec.output": EDGE,
    "PipelineSpec.env": Consumed((SELECT_ENV,), P_ENV, moot=(SPARK_SELECTED,)),
    "PipelineSpec.code": Structural(
        "the pipeline function's text, kept for display and diffs; its nodes are what runs"
    ),
    # ---------------------------------------------------------------- sources
    "ConnectorSpec.kind": Consumed(
        (f"{VALIDATE}::cdc_vs_keys", "fennel_dagster/commit/executable.py::engine_connectors"),
        "tests/commit/test_plan.py::test_sources_the_platform_cannot_read_are_refused_at_commit",
        moot=(LOGGED, SPARK_INGESTED),
    ),
    "ConnectorSpec.name": NAME,
    "ConnectorSpec.config": Consumed(
        (f"{COMPILER}::_Compiler.source", "fennel_dagster/batch/s3_ingest.py"),
        "tests/commit/test_plan.py::test_an_s3_source_compiles_to_an_inbox_a_ledger_and_an_ingest_job",
        moot=(LOGGED,),
    ),
    "SampleSpec.rate": Consumed(
        (f"{SOURCE_RULES}::_sampled",),
        "tests/compat/test_fennel_api.py::test_sampling_keeps_the_same_rows_everywhere",
        moot=(SPARK_INGESTED,),
    ),
    "SampleSpec.using": Consumed(
        (f"{SOURCE_RULES}::_sampled",),
        "tests/compat/test_fennel_api.py::test_sampling_keeps_the_same_rows_everywhere",
        moot=(SPARK_INGESTED,),
    ),
    "SourceSpec.connector": Consumed(
        (f"{COMPILER}::_Compiler.source", "fennel_dagster/commit/executable.py::engine_connectors"),
        "tests/commit/test_plan.py::test_sources_the_platform_cannot_read_are_refused_at_commit",
        moot=(LOGGED, SPARK_INGESTED),
    ),
    "SourceSpec.cdc": Consumed(
        (f"{VALIDATE}::cdc_vs_keys", f"{SOURCE_JOB}::SourceJob._parse"),
        "tests/commit/test_validation.py::test_cdc_must_match_keys",
        moot=(SPARK_INGESTED,),
    ),
    "SourceSpec.disorder": Consumed(
        (f"{SOURCE_JOB}::SourceJob._row_by_row",),
        "tests/engine/test_source_columns.py::test_rows_at_the_watermark_edge_are_judged_alike",
        moot=(
            ("mock", "rows logged to the mock are never late: it keeps no watermark"),
            ("spark", "Spark replays history in time order: no row is late"),
        ),
    ),
    "SourceSpec.every": Consumed(
        (
            "fennel_dagster/batch/s3_ingest.py::S3Poller.run",
            "fennel_dagster/batch/pg_ingest.py::PostgresPoller.run",
        ),
        "tests/engine/test_postgres_source.py::test_a_postgres_table_is_pulled_by_its_cursor_and_each_row_arrives_once",
        via=(("engine", "fennel_dagster/engine/runner.py::run_forever"),),
        moot=(LOGGED,),
    ),
    "SourceSpec.since": Consumed(
        (f"{SOURCE_JOB}::SourceJob.__init__", f"{SOURCE_RULES}::in_time_range"),
        "tests/mock/test_source_range.py::test_since_and_until_keep_the_same_rows_on_the_mock_and_the_engine",
        moot=(SPARK_INGESTED,),
    ),
    "SourceSpec.until": Consumed(
        (f"{SOURCE_JOB}::SourceJob.__init__", f"{SOURCE_RULES}::in_time_range"),
        "tests/mock/test_source_range.py::test_since_and_until_keep_the_same_rows_on_the_mock_and_the_engine",
        moot=(SPARK_INGESTED,),
    ),
    "SourceSpec.env": Consumed((SELECT_ENV,), P_ENV, moot=(SPARK_SELECTED,)),
    "SourceSpec.preproc": Consumed(
        (f"{SOURCE_RULES}::preprocess", "fennel_dagster/batch/pg_ingest.py::check_columns"),
        "tests/compat/test_fennel_api.py::test_source_preproc_ref_eval_and_sample",
    ),
    "SourceSpec.where": Consumed(
        (f"{SOURCE_RULES}::where_function",),
        "tests/compat/test_fennel_api.py::test_source_preproc_ref_eval_and_sample",
        moot=(SPARK_INGESTED,),
    ),
    "SourceSpec.bounded": Consumed(
        (
            "fennel_dagster/batch/exhaustion.py::Exhaustion.__init__",
            f"{VALIDATE}::unread_source_options",
        ),
        "tests/batch/test_exhaustion.py::test_a_postgres_poller_stops_asking_a_bounded_source_after_idleness",
        via=(("engine", "fennel_dagster/engine/runner.py::run_forever"),),
        moot=(LOGGED,),
    ),
    "SourceSpec.idleness": Consumed(
        ("fennel_dagster/batch/exhaustion.py::Exhaustion.__init__",),
        "tests/batch/test_exhaustion.py::test_an_s3_poller_stops_listing_a_bounded_source_after_idleness",
        via=(("engine", "fennel_dagster/engine/runner.py::run_forever"),),
        moot=(LOGGED,),
    ),
    "SourceSpec.earliest": Consumed(
        (f"{SOURCE_RULES}::event_time_problem",),
        "tests/engine/test_poison.py::test_an_event_before_the_sources_earliest_is_an_error_row",
        moot=(SPARK_INGESTED,),
    ),
    "SourceSpec.max_future": Consumed(
        (f"{SOURCE_RULES}::event_time_problem",),
        "tests/engine/test_poison.py::test_an_event_stamped_in_2200_does_not_move_the_watermark",
        moot=(SPARK_INGESTED,),
    ),
    "SourceSpec.sample": Consumed(
        (f"{SOURCE_RULES}::preprocess",),
        "tests/compat/test_fennel_api.py::test_sampling_keeps_the_same_rows_everywhere",
        moot=(SPARK_INGESTED,),
    ),
    # ---------------------------------------------------------------- sinks
    "SinkSpec.connector": _sink(
        SINK_RULES,
        f"{COMPILER}::_Compiler.kafka_sink",
        proof="tests/engine/test_kafka_sink.py::test_the_compiler_emits_one_sink_job_reading_the_dataset_topic",
    ),
    "SinkSpec.cdc": _sink(
        f"{COMPILER}::_Compiler.kafka_sink",
        S3_SINK_RULE,
        proof="tests/engine/test_kafka_sink.py::test_row_changes_map_to_debezium_envelopes",
    ),
    "SinkSpec.every": Refused(S3_SINK_RULE, 3600, platform_only=NO_SINK[1]),
    "SinkSpec.how": _sink(
        S3_SINK_RULE,
        proof="tests/engine/test_s3_sink.py::test_s3_sinks_are_accepted_and_what_the_platform_cannot_write_is_refused",
    ),
    "SinkSpec.renames": Refused(S3_SINK_RULE, (("a", "b"),), platform_only=NO_SINK[1]),
    "SinkSpec.since": Refused(S3_SINK_RULE, "2024-01-01T00:00:00+00:00", platform_only=NO_SINK[1]),
    "SinkSpec.until": Refused(S3_SINK_RULE, "2024-01-01T00:00:00+00:00", platform_only=NO_SINK[1]),
    "SinkSpec.env": _sink(
        SELECT_ENV,
        proof="tests/engine/test_kafka_sink.py::test_env_selection_drops_a_sink_and_its_job",
    ),
    # ---------------------------------------------------------------- expectations
    "ExpectationSpec.type": Consumed(
        ("fennel_dagster/quality/expectations.py",),
        "tests/engine/test_expectation_sample.py::test_expectations_run_in_a_process_whose_main_module_has_no_file",
        moot=(MOCK_NO_EXPECT, SPARK_NO_EXPECT),
    ),
    "ExpectationSpec.kwargs": Consumed(
        ("fennel_dagster/quality/expectations.py",),
        "tests/engine/test_expectation_sample.py::test_expectations_run_in_a_process_whose_main_module_has_no_file",
        moot=(MOCK_NO_EXPECT, SPARK_NO_EXPECT),
    ),
    "ExpectationsSpec.version": Structural(
        "the expectation suite's version: bookkeeping of the suite"
    ),
    "ExpectationsSpec.expectations": Consumed(
        ("fennel_dagster/quality/expectations.py::run",),
        "tests/engine/test_expectation_sample.py::test_expectations_run_in_a_process_whose_main_module_has_no_file",
        moot=(MOCK_NO_EXPECT, SPARK_NO_EXPECT),
    ),
    # ---------------------------------------------------------------- datasets
    "DatasetSpec.name": NAME,
    "DatasetSpec.version": Consumed(
        (
            f"{VALIDATE}::immutability",
            f"{COMPILER}::_physical",
            "fennel_dagster/batch/replay.py::replay",
        ),
        "tests/commit/test_validation.py::test_version_bump_must_propagate_downstream",
    ),
    "DatasetSpec.fields": Structural(
        "the dataset's schema: every executor reads and writes its rows by it"
    ),
    "DatasetSpec.meta": Structural("a container: its fields have entries of their own"),
    "DatasetSpec.index": Consumed(
        (f"{COMPILER}::_Compiler.dataset",),
        "tests/commit/test_blueprints.py::test_every_dataset_gets_its_topics_jobs_and_tables",
        moot=(
            MOCK_ONE_STORE,
            (
                "spark",
                "Spark looks keyed datasets up as of a time from their offline versions, indexed or not",
            ),
        ),
    ),
    "DatasetSpec.online": Consumed(
        (f"{COMPILER}::_Compiler.dataset",),
        "tests/commit/test_blueprints.py::test_every_dataset_gets_its_topics_jobs_and_tables",
        moot=(MOCK_ONE_STORE, ("spark", "Spark reads offline tables, never the online index")),
    ),
    "DatasetSpec.offline": Consumed(
        (f"{COMPILER}::_Compiler.dataset",),
        "tests/commit/test_blueprints.py::test_every_dataset_gets_its_topics_jobs_and_tables",
        moot=(MOCK_ONE_STORE, ("spark", "Spark reads the offline tables the platform made")),
    ),
    "DatasetSpec.history": Consumed(
        (f"{COMPILER}::_Compiler.dataset", "fennel_dagster/offline/table.py::OfflineTable.expire"),
        "tests/declare/test_datasets.py::test_bad_cdc_and_bad_durations_are_explained",
        moot=(
            ("mock", "the mock keeps a test's rows for the test's life"),
            ("spark", "Spark reads the offline table the platform expires"),
        ),
    ),
    "DatasetSpec.sources": Structural("a container: each SourceSpec field has an entry of its own"),
    "DatasetSpec.pipelines": Structural(
        "a container: each PipelineSpec field has an entry of its own"
    ),
    "DatasetSpec.expectations": Consumed(
        ("fennel_dagster/quality/expectations.py::run",),
        "tests/engine/test_expectation_sample.py::test_expectations_run_in_a_process_whose_main_module_has_no_file",
        moot=(MOCK_NO_EXPECT, SPARK_NO_EXPECT),
    ),
    "DatasetSpec.terminal": Consumed(
        (f"{VALIDATE}::terminal_inputs",),
        "tests/commit/test_validation.py::test_continuous_aggregates_cannot_feed_another_pipeline",
        moot=(SPARK_COMMIT,),
    ),
    "DatasetSpec.sinks": _sink(
        SINK_RULES,
        f"{COMPILER}::_kafka_sinks",
        proof="tests/engine/test_kafka_sink.py::test_the_compiler_emits_one_sink_job_reading_the_dataset_topic",
    ),
    "DatasetSpec.erase_keys": Consumed(
        ("fennel_dagster/mock/client.py::MockClient.erase",),
        "tests/compat/test_declarations.py::test_erase_removes_a_keys_rows_now_and_drops_them_when_logged_later",
        moot=(
            (
                "engine",
                "erase is answered by the mock only: the platform commits erase keys (they change nothing until an erase) and refuses erase() by name",
            ),
            ("spark", "erase is answered by the mock only"),
        ),
    ),
    # ---------------------------------------------------------------- featuresets
    "FeatureSpec.name": NAME,
    "FeatureSpec.dtype": Consumed((f"{QUERY}::QueryExecutor._run_one", SPARK_QUERY), P_SPARK_QUERY),
    "FeatureSpec.version": Structural("a feature's version: part of its identity in a commit"),
    "FeatureSpec.default": Consumed((QUERY, SPARK_QUERY), P_SPARK_QUERY),
    "FeatureSpec.description": DOC,
    "FeatureSpec.meta": Structural("a container: its fields have entries of their own"),
    "ExtractorSpec.name": NAME,
    "ExtractorSpec.featureset": EDGE,
    "ExtractorSpec.kind": Consumed(
        (f"{QUERY}::QueryExecutor._run_one", SPARK_QUERY), P_SPARK_QUERY
    ),
    "ExtractorSpec.inputs": Consumed((QUERY, SPARK_QUERY), P_SPARK_QUERY),
    "ExtractorSpec.outputs": Consumed((QUERY, SPARK_QUERY), P_SPARK_QUERY),
    "ExtractorSpec.version": Structural("an extractor's version: part of its identity in a commit"),
    "ExtractorSpec.deps": Consumed(
        (f"{VALIDATE}::extractors", f"{SPARK_EXTRACTORS}::run_python"),
        "tests/commit/test_validation.py::test_extractor_deps_must_be_in_the_commit",
    ),
    "ExtractorSpec.code": Consumed(
        (f"{QUERY}::QueryExecutor._callable",), P_QUERY, via=(SPARK_VIA_QUERY,)
    ),
    "ExtractorSpec.expr": Consumed(
        (f"{QUERY}::QueryExecutor._run_one", SPARK_QUERY), P_SPARK_QUERY
    ),
    "ExtractorSpec.lookup_dataset": Consumed(
        (f"{QUERY}::QueryExecutor._run_one", SPARK_QUERY), P_SPARK_QUERY
    ),
    "ExtractorSpec.lookup_field": Consumed(
        (f"{QUERY}::QueryExecutor._run_one", SPARK_QUERY), P_SPARK_QUERY
    ),
    "ExtractorSpec.default": Consumed((QUERY, SPARK_QUERY), P_SPARK_QUERY),
    "ExtractorSpec.env": Consumed((SELECT_ENV,), P_ENV, moot=(SPARK_SELECTED,)),
    "ExtractorSpec.meta": Structural("a container: its fields have entries of their own"),
    "FeaturesetSpec.name": NAME,
    "FeaturesetSpec.features": Structural(
        "a container: each FeatureSpec field has an entry of its own"
    ),
    "FeaturesetSpec.extractors": Structural(
        "a container: each ExtractorSpec field has an entry of its own"
    ),
    "FeaturesetSpec.meta": Structural("a container: its fields have entries of their own"),
    "FeaturesetSpec.helpers": Consumed(
        (f"{QUERY}::_FeaturesetHandle.__init__",),
        "tests/compat/test_client_tests_api.py::test_a_pipelines_includes_reach_its_lambdas_and_a_helper_names_fields_by_cls",
        via=(SPARK_VIA_QUERY,),
    ),
    "HelperSpec.name": NAME,
    "HelperSpec.kind": Consumed(
        (f"{QUERY}::_FeaturesetHandle.__init__",),
        "tests/compat/test_client_tests_api.py::test_a_pipelines_includes_reach_its_lambdas_and_a_helper_names_fields_by_cls",
        via=(SPARK_VIA_QUERY,),
    ),
    "HelperSpec.code": Consumed(
        (f"{QUERY}::_FeaturesetHandle.__init__",),
        "tests/compat/test_client_tests_api.py::test_a_pipelines_includes_reach_its_lambdas_and_a_helper_names_fields_by_cls",
        via=(SPARK_VIA_QUERY,),
    ),
    # ---------------------------------------------------------------- commit
    "CommitSpec.message": Structural("the commit's message: recorded and shown"),
    "CommitSpec.datasets": Structural(
        "a container: each DatasetSpec field has an entry of its own"
    ),
    "CommitSpec.featuresets": Structural(
        "a container: each FeaturesetSpec field has an entry of its own"
    ),
    "CommitSpec.env": Consumed((SELECT_ENV,), P_ENV, moot=(SPARK_SELECTED,)),
    "CommitSpec.incremental": Consumed(
        (
            "fennel_dagster/commit/graph.py::EntityGraph.build",
            "fennel_dagster/commit/server.py::DefinitionServer.process_spec",
        ),
        "tests/commit/test_blueprints.py::test_incremental_commit_keeps_entities_not_mentioned",
        moot=(SPARK_COMMIT,),
    ),
    "CommitSpec.wire_version": Structural("the wire format's version: bookkeeping of the encoding"),
}

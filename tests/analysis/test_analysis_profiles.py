"""Imported power-limit profiles, on the real Zeus A40/V100 files; expected values are worked
out by hand from the CSV rows quoted in each test."""

from __future__ import annotations

from pathlib import Path

import pytest

from wattlab.analysis.profiles import analyze_profile, describe_region, load_zeus_profile
from wattlab.errors import ConfigError, DataError
from wattlab.estimate.zeus_profiles import profiles_dir

SOURCE = profiles_dir()  # the packaged copy (or $WATTLAB_ZEUS_PROFILES)

# The real files (Zeus tests/profile_data, Apache-2.0), copied verbatim so the tests run
# anywhere; test_embedded_copies_match_the_files checks them against the originals.
A40_RESNET50_1 = """\
start_time,window_name,elapsed_time,gpu0_energy
13585781.019341944,__GlobalPowerLimitOptimizer_300,24.011604165658355,6224.88599999249
13585811.644144302,__GlobalPowerLimitOptimizer_275,24.062182845547795,6122.302000001073
13585842.37524898,__GlobalPowerLimitOptimizer_250,24.163184974342585,5915.574000000954
13585873.314519016,__GlobalPowerLimitOptimizer_225,24.547974875196815,5499.97199998796
13585904.78554545,__GlobalPowerLimitOptimizer_200,25.185305630788207,5017.506999999285
13585937.634879576,__GlobalPowerLimitOptimizer_175,27.93894662335515,4867.478000000119
13585975.573927296,__GlobalPowerLimitOptimizer_150,36.850174985826015,5512.1500000059605
13586027.694475032,__GlobalPowerLimitOptimizer_125,56.475551787763834,7071.8610000014305
13586102.901024535,__GlobalPowerLimitOptimizer_100,69.36270336806774,8033.5680000036955
"""

A40_RESNET50_4 = """\
start_time,window_name,elapsed_time,gpu0_energy,gpu1_energy,gpu2_energy,gpu3_energy
13586410.284991832,__GlobalPowerLimitOptimizer_300,8.226085375994444,1067.512999996543,1072.432999998331,1049.1979999989271,1129.594999998808
13586420.690541402,__GlobalPowerLimitOptimizer_275,8.02514747902751,1066.0059999972582,1045.9909999966621,1062.390000000596,1142.16400000453
13586431.024962232,__GlobalPowerLimitOptimizer_250,8.027751851826906,1061.5929999947548,1071.112000003457,1087.7810000032187,1058.113999992609
13586441.318687372,__GlobalPowerLimitOptimizer_225,8.313190603628755,1070.4789999872446,1066.319000005722,1094.1369999945164,1073.3629999905825
13586451.96402628,__GlobalPowerLimitOptimizer_200,8.475580338388681,1060.655000001192,1076.4259999990463,1088.531999990344,1079.5069999992847
13586462.627122916,__GlobalPowerLimitOptimizer_175,8.265844656154513,1006.8330000042915,1016.4730000048876,1023.9500000029802,1007.2660000026226
13586473.198574994,__GlobalPowerLimitOptimizer_150,7.946043524891138,929.9340000003576,944.4420000016689,945.1169999986887,918.8540000021458
13586483.42585746,__GlobalPowerLimitOptimizer_125,8.140870355069637,906.6920000016689,925.9500000029802,906.4490000009537,892.0359999984503
13586493.891529072,__GlobalPowerLimitOptimizer_100,8.274237452074885,839.1720000058413,870.1389999985695,845.6410000026226,837.4890000075102
"""

V100_RESNET50_1 = """\
start_time,window_name,elapsed_time,gpu0_energy
529720.159820945,__GlobalPowerLimitOptimizer_250,26.674534152960405,6065.030000000028
529754.324501186,__GlobalPowerLimitOptimizer_225,27.28109067096375,5815.5229999999865
529789.366252268,__GlobalPowerLimitOptimizer_200,28.313233915017918,5394.746999999974
529825.752099632,__GlobalPowerLimitOptimizer_175,29.454168353928253,5059.207999999984
529864.100840558,__GlobalPowerLimitOptimizer_150,32.41288539709058,4830.296000000031
529907.396402422,__GlobalPowerLimitOptimizer_125,40.209291090024635,4969.58600000001
529962.016393911,__GlobalPowerLimitOptimizer_100,53.86649834597483,5327.103000000003
"""

FILES = {
    "A40+resnet50+gpu0.csv": A40_RESNET50_1,
    "A40+resnet50+gpu0,1,2,3.csv": A40_RESNET50_4,
    "V100+resnet50+gpu0.csv": V100_RESNET50_1,
}


@pytest.fixture
def profile(tmp_path):
    """Write one of the real profiles under its real name and return the path."""

    def write(name: str) -> Path:
        path = tmp_path / name
        path.write_text(FILES[name])
        return path

    return write


def test_embedded_copies_match_the_files():
    for name, text in FILES.items():
        assert (SOURCE / name).read_text() == text


def test_a40_resnet50_single_gpu_operating_region(profile):
    df = load_zeus_profile(profile("A40+resnet50+gpu0.csv"))
    assert list(df["power_limit_w"]) == [300, 275, 250, 225, 200, 175, 150, 125, 100]
    assert df.attrs["gpu_name"] == "A40" and df.attrs["model"] == "resnet50"
    assert int(df["gpus"].iloc[0]) == 1
    a = analyze_profile(df)
    assert a["baseline_w"] == 300
    by_w = {x["power_limit_w"]: x for x in a["limits"]}
    # rows: 300 W -> 24.011604165658355 s, 6224.88599999249 J
    #       250 W -> 24.163184974342585 s, 5915.574000000954 J
    assert by_w[250]["energy_change"] == pytest.approx(5915.574000000954 / 6224.88599999249 - 1)
    assert by_w[250]["energy_change"] == pytest.approx(-0.04969, abs=1e-5)  # 4.97 % saved
    assert by_w[250]["time_change"] == pytest.approx(0.00631, abs=1e-5)  # 0.63 % slower
    # 275 W saves only 1.6 %; 225 W saves 11.6 % but costs 24.547974875196815/24.0116 - 1 = 2.2 %
    assert by_w[225]["time_change"] == pytest.approx(24.547974875196815 / 24.011604165658355 - 1)
    assert a["operating_region"] == [250.0]
    # 150 W (36.85 s, 5512 J) is slower and hungrier than 175 W (27.94 s, 4867 J)
    assert a["pareto"] == [300.0, 275.0, 250.0, 225.0, 200.0, 175.0]
    assert a["min_energy_w"] == 175.0 and a["min_time_w"] == 300.0
    assert "250 W" in describe_region(a)


def test_a40_resnet50_four_gpus_sums_gpus(profile):
    df = load_zeus_profile(profile("A40+resnet50+gpu0,1,2,3.csv"))
    assert int(df["gpus"].iloc[0]) == 4
    row300 = df[df["power_limit_w"] == 300].iloc[0]
    assert row300["energy_j"] == pytest.approx(
        1067.512999996543 + 1072.432999998331 + 1049.1979999989271 + 1129.594999998808
    )
    assert row300["gpu3_energy_j"] == pytest.approx(1129.594999998808)
    a = analyze_profile(df)
    by_w = {x["power_limit_w"]: x for x in a["limits"]}
    e150 = 929.9340000003576 + 944.4420000016689 + 945.1169999986887 + 918.8540000021458
    assert by_w[150]["energy_j"] == pytest.approx(e150)
    assert by_w[150]["energy_change"] == pytest.approx(e150 / 4318.739 - 1, abs=1e-6)
    assert by_w[150]["time_change"] == pytest.approx(7.946043524891138 / 8.226085375994444 - 1)
    # at 175-100 W these four GPUs saved 6-21 % with at most +0.6 % time (8.274 s vs 8.226 s)
    assert a["operating_region"] == [175.0, 150.0, 125.0, 100.0]


def test_v100_region_depends_on_the_penalty_allowed(profile):
    df = load_zeus_profile(profile("V100+resnet50+gpu0.csv"))
    a = analyze_profile(df)
    assert a["baseline_w"] == 250
    # 225 W: 27.28109067096375 / 26.674534152960405 = +2.27 % time, 5815.52 / 6065.03 = -4.1 %
    assert a["operating_region"] == []
    loose = analyze_profile(df, max_penalty=0.03)
    assert loose["operating_region"] == [225.0]
    tight = analyze_profile(df, min_saving=0.05, max_penalty=0.03)
    assert tight["operating_region"] == []


def test_baseline_w_chooses_the_reference_or_lists_limits(profile):
    df = load_zeus_profile(profile("A40+resnet50+gpu0.csv"))
    a = analyze_profile(df, baseline_w=250)
    by_w = {x["power_limit_w"]: x for x in a["limits"]}
    assert by_w[250]["energy_change"] == 0.0 and by_w[250]["is_baseline"]
    assert by_w[300]["energy_change"] == pytest.approx(6224.88599999249 / 5915.574000000954 - 1)
    with pytest.raises(ConfigError, match=r"260 is not a power limit.*300, 275, 250"):
        analyze_profile(df, baseline_w=260)


def test_several_windows_at_one_limit_give_medians(tmp_path):
    path = tmp_path / "T4+tiny+gpu0,1.csv"
    path.write_text(
        "start_time,window_name,elapsed_time,gpu0_energy,gpu1_energy\n"
        "0,__GlobalPowerLimitOptimizer_70,10,100,100\n"
        "1,__GlobalPowerLimitOptimizer_70,12,110,120\n"
        "2,__GlobalPowerLimitOptimizer_70,11,90,95\n"
        "3,__GlobalPowerLimitOptimizer_60,13,80,80\n"
    )
    df = load_zeus_profile(path)
    row = df[df["power_limit_w"] == 70].iloc[0]
    assert row["time_s"] == 11.0  # median of 10, 12, 11
    assert row["energy_j"] == 200.0  # median of the per-window sums 200, 230, 185
    assert row["windows"] == 3
    assert df.attrs["gpu_name"] == "T4"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("start_time,window_name,gpu0_energy\n0,__GlobalPowerLimitOptimizer_300,5\n",
         "lacks the column"),
        ("start_time,window_name,elapsed_time\n0,__GlobalPowerLimitOptimizer_300,5\n",
         r"gpu<N>_energy"),
        ("start_time,window_name,elapsed_time,gpu0_energy\n0,warmup,5,6\n",
         "line 2: window_name 'warmup'"),
        ("start_time,window_name,elapsed_time,gpu0_energy\n0,__GlobalPowerLimitOptimizer_300,"
         "5,lots\n", "gpu0_energy is 'lots'"),
        ("start_time,window_name,elapsed_time,gpu0_energy\n0,__GlobalPowerLimitOptimizer_300,"
         "0,6\n", "elapsed_time is '0'"),
        ("start_time,window_name,elapsed_time,gpu0_energy\n", "no measurement rows"),
        ("", "not a readable CSV"),
    ],
)  # fmt: skip
def test_malformed_profiles_are_data_errors_naming_the_file(tmp_path, text, problem):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(DataError, match=problem) as info:
        load_zeus_profile(path)
    assert "'bad.csv'" in str(info.value)


def test_missing_profile_file(tmp_path):
    with pytest.raises(DataError, match="'nope.csv' does not exist"):
        load_zeus_profile(tmp_path / "nope.csv")

# The same rounds as ../command.sh, for the tree of 3d4d389, into this folder.
R=bench/results/cpu-2026-12-04-native-loop/blocking bash bench/results/cpu-2026-12-04-native-loop/command.sh

from accelflow.cli import main

main()
